"""Garbage collection during a check: collections between phases walk only what the check made."""

import gc
import weakref

import graphsafe
from tests.targets.plain_torch import Safe


def _check() -> graphsafe.CheckResult:
    return graphsafe.check(Safe, engine="emulate", device="cpu", examples=4, seed=0, database=False)


def test_a_check_leaves_nothing_frozen_when_nothing_was_frozen_before():
    gc.unfreeze()
    assert _check().ok
    assert gc.get_freeze_count() == 0


def test_what_was_frozen_before_a_check_stays_frozen():
    gc.unfreeze()
    keep = [object() for _ in range(10)]  # noqa: F841 - tracked containers to freeze
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        assert _check().ok
        assert gc.get_freeze_count() > 0  # not unfrozen (frozen objects freed by refcounting leave the count)
    finally:
        gc.unfreeze()


def test_a_phases_target_instances_are_collected_before_the_check_returns():
    made = []

    class Cyclic(Safe):
        def setup(self, spec, device):
            super().setup(spec, device)
            self.me = self  # only the garbage collector frees an instance
            made.append(weakref.ref(self))

    gc.unfreeze()
    gc.disable()  # no automatic collection: only the check's own
    try:
        assert graphsafe.check(
            Cyclic, engine="emulate", device="cpu", examples=4, seed=0, database=False, capture=("worst", "minimal")
        ).ok
        alive = sum(r() is not None for r in made)
    finally:
        gc.enable()
    assert len(made) > 2 and alive <= 1, f"{alive} of {len(made)} instances still alive"

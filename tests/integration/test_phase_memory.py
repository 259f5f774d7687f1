"""Each capture phase's graphs and target instances are gone before the next phase makes its own; a full
collection runs only when something the phase made is still alive."""

from __future__ import annotations

import gc
import weakref

import pytest

from graphsafe.checker import api
from graphsafe.checker.api import run_check
from graphsafe.checker.options import CheckOptions
from tests.targets import synthetic as S


class SelfReferring(S.Safe):
    """Safe, but each instance refers to itself: only a collection frees one."""

    def setup(self, spec, device):
        super().setup(spec, device)
        self.me = self


@pytest.fixture
def phases_seen(monkeypatch):
    """Per phase end: (instances of the checked class alive before any collection, collections run)."""
    made: list[weakref.ref] = []
    seen: list[tuple[int, int]] = []

    def tracking_setup(original):
        def setup(self, spec, device):
            made.append(weakref.ref(self))
            return original(self, spec, device)

        return setup

    class CountingGc:
        collections = 0

        def __getattr__(self, name):
            return getattr(gc, name)

        def collect(self, *args):
            CountingGc.collections += 1
            return gc.collect(*args)

    original_release = api._release

    def release(runner, session):
        before = CountingGc.collections
        original_release(runner, session)
        seen.append((sum(r() is not None for r in made), CountingGc.collections - before))

    monkeypatch.setattr(api, "gc", CountingGc())
    monkeypatch.setattr(api, "_release", release)
    for cls in (S.Safe, SelfReferring):
        monkeypatch.setattr(cls, "setup", tracking_setup(cls.setup))
    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection may free what the phase left
    try:
        yield seen
    finally:
        if was_enabled:
            gc.enable()


def _check(cls):
    return run_check(
        cls, CheckOptions(engine="emulate", seed=0, database=False, examples=8, steps=2, probes=["stale-pointer"])
    )


def test_a_passing_phase_is_freed_without_a_collection(phases_seen):
    assert _check(S.Safe).ok
    assert len(phases_seen) == 4
    assert phases_seen == [(0, 0)] * 4, "every instance and graph died when its phase ended, none collected"


def test_a_phase_whose_instances_refer_to_themselves_is_collected(phases_seen):
    assert _check(SelfReferring).ok
    assert len(phases_seen) == 4
    assert all(collected == 1 for _, collected in phases_seen)
    assert all(alive == 0 for alive, _ in phases_seen), "the collection freed them before the next phase"

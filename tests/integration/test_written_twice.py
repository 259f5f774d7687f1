"""A prepare() that writes a buffer twice (its parent's values, then its own fix-up) is no mistake where the graph
reads the right final values: the finding of a real bug elsewhere names that bug, not the double write."""

from __future__ import annotations

import graphsafe
from graphsafe import Batch
from tests.targets.fixup import FixupIndex, FixupIndexPadSlotZero

POOL = 16  # the state pool's slots (the spec's blocks less one); the request holding block 16 owns slot 0
CAPTURE = Batch(query_lens=(1,) * 4, seq_lens=(3,) * 4, block_table=((1,), (2,), (3,), (4,)), seed=1)
#: two live requests in a graph of four: one of them owns slot 0, which the padded slots alias in the buggy twin
STEP = Batch(query_lens=(1,) * 2, seq_lens=(3,) * 2, block_table=((16,), (5,)), seed=2)


def reproduce(target: type) -> graphsafe.CheckResult:
    return graphsafe.reproduce(target, [STEP], capture_batch=CAPTURE, capture_size=4, engine="emulate")


def test_a_fixed_up_index_with_padding_aliasing_live_state_is_stale_padding():
    r = reproduce(FixupIndexPadSlotZero)
    assert [f.kind.value for f in r.findings] == ["stale-padding"], r.summary()
    assert "wrote twice" not in r.findings[0].message


def test_a_fixed_up_index_with_harmless_padding_is_no_finding():
    assert reproduce(FixupIndex).ok


def test_the_fixed_up_index_searched_gets_stale_padding_only():
    r = graphsafe.check(FixupIndexPadSlotZero, engine="emulate", examples=30, seed=0, database=False)
    assert r.kinds == {"stale-padding"}, r.summary()


def test_the_fixed_up_index_with_harmless_padding_searched_is_clean():
    assert graphsafe.check(FixupIndex, engine="emulate", examples=30, seed=0, database=False).ok

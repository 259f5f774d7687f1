"""A race through padded rows: two replays of one batch differ because padded rows write into live slots.
When the padded rows hold an earlier batch's values (they agree once a fresh prepare()'s values are put there),
the finding is stale-padding, naming the buffer.  When fresh padding races alike, the same step run eagerly on fresh
instances decides: padded runs differ from eager and unpadded ones never do, so the padding aliases live rows
(stale-padding); a target whose unpadded runs race too (rows past the live ones alias on every batch, or two live
rows share a slot) stays nondeterministic-replay."""

from __future__ import annotations

import pytest
import torch

import graphsafe
from graphsafe import Batch
from tests.targets.races import (
    RacyCache,
    RacyCacheLiveCollision,
    RacyCacheOneSlot,
    RacyCachePaddedAlias,
    RacyCacheSharedSlot,
    RacyCacheStaleSlots,
    RacyCacheStaleSlotsCounted,
)

#: the graph captured on 8 requests of 4 tokens (blocks 1..8); the step's 4 requests own blocks 5..8, so the
#: padded rows 16..31, left with the capture's slots, aim at the 16 slots its live rows write
CAPTURE = Batch(query_lens=(4,) * 8, seq_lens=(4,) * 8, block_table=tuple((b,) for b in range(1, 9)), seed=11)
STEP = Batch(query_lens=(4,) * 4, seq_lens=(4,) * 4, block_table=((5,), (6,), (7,), (8,)), seed=12)


def reproduce(target: type) -> graphsafe.CheckResult:
    torch.manual_seed(0)  # the scatter's drawn order: with 16 slots written twice, two replays differ anyway
    return graphsafe.reproduce(target, [STEP], capture_batch=CAPTURE, capture_size=8, engine="emulate")


def test_a_race_through_padded_rows_an_earlier_batch_left_is_stale_padding():
    r = reproduce(RacyCacheStaleSlots)
    assert [f.kind.value for f in r.findings] == ["stale-padding"]
    f = r.findings[0]
    assert f.details["race"] is True
    assert f.details["stale_buffers"] == ["self.slots[16:32]"]
    assert "two replays of one prepared batch differ" in f.message


def test_an_input_that_differs_with_history_in_a_live_row_does_not_hide_the_race_through_padding():
    r = reproduce(RacyCacheStaleSlotsCounted)
    assert [f.kind.value for f in r.findings] == ["stale-padding"]
    assert r.findings[0].details["stale_buffers"] == ["self.slots[16:32]"]


def test_a_race_that_fresh_padding_has_too_stays_nondeterministic_replay():
    r = reproduce(RacyCacheSharedSlot)
    assert [f.kind.value for f in r.findings] == ["nondeterministic-replay"]
    msg = r.findings[0].message
    assert "not stale padding: no input a recorded launch reads differs from a fresh prepare()" in msg
    assert "the step run unpadded on fresh instances races too" in msg


def test_padding_that_aliases_live_rows_only_when_padded_is_stale_padding():
    r = reproduce(RacyCachePaddedAlias)
    assert [f.kind.value for f in r.findings] == ["stale-padding"], r.summary()
    f = r.findings[0]
    assert f.details["aliased"] is True
    assert "gives one answer every time unpadded" in f.message


def test_a_race_between_live_rows_stays_nondeterministic_replay():
    r = reproduce(RacyCacheLiveCollision)
    assert [f.kind.value for f in r.findings] == ["nondeterministic-replay"], r.summary()
    assert "not stale padding" in r.findings[0].message


def test_a_race_first_met_at_a_later_step_is_nondeterministic_replay_not_a_lucky_repair():
    one = Batch(query_lens=(1,), seq_lens=(1,), block_table=((5,),), seed=13)  # one token: nothing to race
    torch.manual_seed(0)
    r = graphsafe.reproduce(RacyCacheOneSlot, [one, STEP], capture_batch=CAPTURE, capture_size=8, engine="emulate")
    assert [f.kind.value for f in r.findings] == ["nondeterministic-replay"], r.summary()
    f = r.findings[0]
    assert f.step == 1
    assert "a repair cannot be judged on replays that race" in f.message
    assert "not stale padding" in f.message


def test_the_same_cache_with_its_padding_in_the_null_block_passes():
    assert reproduce(RacyCache).ok


@pytest.mark.parametrize("probes", [["nondeterministic-replay"]])
def test_a_check_that_does_not_report_stale_padding_does_not_report_the_race_as_another_kind(probes):
    torch.manual_seed(0)
    r = graphsafe.reproduce(
        RacyCacheStaleSlots, [STEP], capture_batch=CAPTURE, capture_size=8, engine="emulate", probes=probes
    )
    assert r.ok

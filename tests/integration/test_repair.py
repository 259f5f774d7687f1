"""The repair experiment decides which buffer is the cause: the buffers the graph reads are set back to what the
replay read, given what a fresh eager instance holds, and the graph replays.  A difference no probe explains but a
repair fixes is named from the repaired buffer and its writers; a probe's buffer claim that a repair of other
buffers contradicts is set aside; a difference no repair fixes, which a graph captured for the batch does not show,
is named from the two captures' launches."""

from __future__ import annotations

import pytest

import graphsafe
from graphsafe import Batch
from graphsafe.capture.statewalk import storage_key, walk
from graphsafe.diagnosis import Probe, loop
from graphsafe.findings import Finding, FindingKind
from tests.targets import hazards as H
from tests.targets import scaled_blocks as T

TABLE = ((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12))
#: three live requests in the worst-case graph of four slots, after the capture's larger batch
STEP = Batch(query_lens=(1, 1, 1), seq_lens=(16, 13, 13), block_table=TABLE, seed=0)


def reproduce(cls, steps=(STEP,)):
    return graphsafe.reproduce(cls, list(steps), engine="emulate")


def blaming(path: str) -> Probe:
    """A diagnosis probe that always blames the buffer at ``path`` (``unpersisted-metadata``)."""

    def claim(ctx):
        return Finding(
            kind=FindingKind.UNPERSISTED_METADATA, message=f"blames {path}", where=path, cause=f"buffer:{path}"
        )

    return Probe("unpersisted-metadata", FindingKind.UNPERSISTED_METADATA, "diagnosis", claim, f"blames {path}")


@pytest.fixture
def no_probes(monkeypatch):
    """No diagnosis probe explains anything: what is left is the repair experiment."""
    monkeypatch.setattr(loop, "at_stage", lambda stage: ())


@pytest.fixture
def wrong_claim(monkeypatch):
    """One diagnosis probe, which always blames ``self.q`` (a buffer this step's prepare() writes whole, padding zeroed:
    it holds what every fresh instance holds)."""

    monkeypatch.setattr(loop, "at_stage", lambda stage: (blaming("self.q"),))


def test_a_difference_a_repaired_buffer_fixes_is_named_with_the_buffer_and_its_writers(no_probes):
    [f] = reproduce(H.paged_decode.PrefixOnlyMetadata).errors
    assert f.kind.value == "stale-padding", f.summary()
    assert f.where == "self.slot_mapping" and "the replay equal eager" in f.message
    assert f.details["writers"] == ["tests/targets/hazards/paged_decode.py:48 in prepare `self.write_inputs(batch)`"]


def test_a_claim_on_a_buffer_every_fresh_instance_agrees_with_is_set_aside_for_the_repair(wrong_claim):
    [f] = reproduce(H.paged_decode.PrefixOnlyMetadata).errors
    assert f.where == "self.slot_mapping", f.summary()


def test_a_frozen_value_no_repair_fixes_is_named_by_recapture_without_any_probe(no_probes):
    r = graphsafe.check(
        H.paged_decode.HostTemperature, engine="emulate", examples=10, seed=0, database=False, isolate="none"
    )
    [f] = r.errors
    assert f.kind.value == "frozen-host-value", f.summary()
    assert f.details["seen_in"] == "recapture" and "no repair of the buffers" in f.message, f.summary()


def padding_probe() -> Probe:
    return next(p for p in loop.at_stage("diagnosis") if p.name == "stale-padding")


@pytest.fixture
def inert_claim_first(monkeypatch):
    """A probe that always blames ``self.calls`` (a count of prepare() calls the graph reads: it differs from a fresh
    instance's and adds nothing), then the real stale-padding probe."""
    padding = padding_probe()
    monkeypatch.setattr(loop, "at_stage", lambda stage: (blaming("self.calls"), padding))


def test_when_no_repair_fixes_the_replay_a_claim_on_a_buffer_that_changes_nothing_is_set_aside(inert_claim_first):
    r = graphsafe.check(
        T.ScaledBlocksPadAliasCounted, engine="emulate", examples=10, seed=0, database=False, isolate="none"
    )
    assert r.kinds == {"stale-padding"}, r.summary()


def test_a_claim_on_a_buffer_poisoned_alike_in_every_instance_is_not_set_aside_as_inert(monkeypatch):
    """An accumulator nothing resets holds the session's NaN poison before each replay, and so does every fresh
    instance's: no source holds anything else there, so the claim experiment has nothing to test and the claim
    stands (compared as values, NaN never equals NaN, and the claim was set aside as changing nothing)."""
    from tests.targets.hazards.accumulate import SplitKAccumulateNeverReset

    monkeypatch.setattr(loop, "at_stage", lambda stage: (blaming("self.acc"),))
    r = graphsafe.check(
        SplitKAccumulateNeverReset, engine="emulate", examples=3, seed=0, database=False, isolate="none"
    )
    [f] = r.errors
    assert f.kind.value == "unpersisted-metadata" and f.where == "self.acc", f.summary()


def blaming_bytes(path: str, rows: slice) -> Probe:
    """:func:`blaming`, naming the bytes of ``rows`` of the buffer at ``path`` as the ones the graph read wrong."""
    claim = blaming(path)

    def run(ctx):
        t = dict(walk(ctx.session.target))[path]
        view = t[rows]
        lo = view.storage_offset() * t.element_size()
        ctx.evidence.claim(claim.name, storage_key(t), (lo, lo + view.numel() * t.element_size()))
        return claim.run(ctx)

    return Probe(claim.name, claim.kind, claim.stage, run, claim.summary)


def test_fresh_values_only_outside_the_bytes_a_claim_names_leave_it_untested(monkeypatch):
    """The claim of the inert test above on ``self.calls``, naming only ``self.calls[1]``, which every instance holds
    alike: fresh values differ in ``self.calls[0]`` alone, which cannot test it (as words a library's plan writes
    differently call to call cannot test a claim on others), so the claim stands; naming ``self.calls[0]``, it is
    set aside."""
    padding = padding_probe()
    monkeypatch.setattr(loop, "at_stage", lambda stage: (blaming_bytes("self.calls", slice(1, None)), padding))
    r = graphsafe.check(
        T.ScaledBlocksPadAliasCounted, engine="emulate", examples=10, seed=0, database=False, isolate="none"
    )
    assert r.kinds == {"unpersisted-metadata"}, r.summary()
    monkeypatch.setattr(loop, "at_stage", lambda stage: (blaming_bytes("self.calls", slice(0, 1)), padding))
    r = graphsafe.check(
        T.ScaledBlocksPadAliasCounted, engine="emulate", examples=10, seed=0, database=False, isolate="none"
    )
    assert r.kinds == {"stale-padding"}, r.summary()


@pytest.fixture
def race_unseen_then_claim(monkeypatch):
    """Replays that race at the diagnosed step but landed alike in the race experiment's pairs (none are run), no
    repair that fixes the replay, and a probe that blames ``self.calls`` (a count of prepare() calls the graph reads,
    which differs from a fresh instance's but adds nothing)."""
    from graphsafe.checker import steps
    from graphsafe.diagnosis.repair import Repair

    monkeypatch.setattr(steps, "at_stage", lambda stage: ())  # no step probe sees the race first
    monkeypatch.setattr(loop, "at_stage", lambda stage: (blaming("self.calls"),))
    monkeypatch.setattr(loop, "RACE_PAIRS", 0)
    monkeypatch.setattr(loop, "repair", lambda ctx: Repair(False))


def test_a_claim_whose_replay_does_not_repeat_gives_way_to_the_race_experiment(race_unseen_then_claim):
    import torch

    from tests.integration.test_padding_race import CAPTURE
    from tests.integration.test_padding_race import STEP as RACY_STEP
    from tests.targets.races import RacyCacheStaleSlotsCounted

    torch.manual_seed(0)
    r = graphsafe.reproduce(
        RacyCacheStaleSlotsCounted, [RACY_STEP], capture_batch=CAPTURE, capture_size=8, engine="emulate"
    )
    [f] = r.errors
    assert f.kind.value == "stale-padding", f.summary()
    assert f.details["race"] is True and f.details["stale_buffers"] == ["self.slots[16:32]"]

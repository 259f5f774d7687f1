"""Capture policies: which batch fills each graph at capture, and the order sizes are captured in."""

import pytest

from graphsafe import Batch, CaptureSpec, CheckOptions, Support, UsageError
from graphsafe.capture.policies import EXPLORE, POLICIES, resolve_capture
from graphsafe.checker.plans import phases
from graphsafe.contract import CAPTURE_SEED

SPEC = CaptureSpec(max_reqs=4, max_query_len=3, max_seq_len=32, block_size=8)


def test_worst_case_fills_every_slot_at_the_longest_lengths():
    b = POLICIES["worst"].batch_for(SPEC, Support.ALWAYS, 4)
    assert b.query_lens == (3,) * 4 and b.seq_lens == (32,) * 4 and b.seed == CAPTURE_SEED


def test_minimal_capture_is_single_token_and_shortest_sequence_but_uniform_batches_keep_their_length():
    b = POLICIES["minimal"].batch_for(SPEC, Support.ALWAYS, 2)
    assert b.query_lens == (1, 1) and b.seq_lens == (1, 1) and b.num_slots == 2
    u = POLICIES["minimal"].batch_for(SPEC, Support.UNIFORM_BATCH, 2)
    assert u.query_lens == (3, 3) and u.seq_lens == (3, 3)


def test_ascending_is_the_worst_case_captured_smallest_first():
    assert POLICIES["ascending"].ascending and not POLICIES["worst"].ascending
    assert POLICIES["ascending"].batch_for(SPEC, Support.ALWAYS, 2) == POLICIES["worst"].batch_for(
        SPEC, Support.ALWAYS, 2
    )


def test_explore_is_the_default_and_names_every_policy():
    assert [p.name for p in CheckOptions().policies] == list(EXPLORE) == ["worst", "ascending", "minimal", "drawn"]
    assert [p.name for p in resolve_capture("minimal,worst".split(","))] == ["minimal", "worst"]


def test_a_function_gives_the_engines_own_capture_batch_padded_to_the_size():
    def engine_batch(size):
        return Batch((1,), (5,), ((1,),), seed=CAPTURE_SEED)

    [policy] = CheckOptions(capture=engine_batch).policies
    b = policy.batch_for(SPEC, Support.ALWAYS, 4)
    assert policy.name.startswith("custom:") and b.num_slots == 4 and b.seq_lens == (5,)


def test_unknown_policies_are_usage_errors_that_offer_the_api_a_function_too():
    with pytest.raises(UsageError, match="unknown capture policy 'best'.*or pass a function size -> Batch"):
        CheckOptions(capture="best")


def test_phases_share_exactly_the_examples_asked_for():
    split = phases(resolve_capture("explore"), 50)
    assert [p.policy.name for p in split] == list(EXPLORE)  # the order they run in
    assert [p.examples for p in split] == [25, 5, 13, 7] and sum(p.examples for p in split) == 50
    for n in range(1, 30):
        assert sum(p.examples for p in phases(resolve_capture("explore"), n)) == n


def test_with_few_examples_the_policies_that_matter_most_run():
    assert [(p.policy.name, p.examples) for p in phases(resolve_capture("explore"), 2)] == [
        ("worst", 1),
        ("minimal", 1),
    ]
    assert [(p.policy.name, p.examples) for p in phases(resolve_capture("explore"), 3)] == [
        ("worst", 1),
        ("minimal", 1),
        ("drawn", 1),
    ]
    assert [p.examples for p in phases(resolve_capture("minimal"), 7)] == [7]


def test_a_check_of_drawn_captures_learns_kernel_writes_in_its_first_capture_only(monkeypatch):
    import graphsafe
    from graphsafe.engines import emulate
    from tests.targets import synthetic

    recorders = []
    warmup = emulate.EmulatorEngine.warmup

    def recording_warmup(self, fn, **kw):
        recorders.append(warmup(self, fn, **kw))
        return recorders[-1]

    monkeypatch.setattr(emulate.EmulatorEngine, "warmup", recording_warmup)
    result = graphsafe.check(synthetic.Safe, engine="emulate", examples=4, capture="drawn", database=False, seed=0)
    assert result.ok, result.summary()
    assert len(recorders) >= 2, "one warm-up per drawn capture"
    assert recorders[0].learned_kernels, "the first capture learns the target's kernels"
    assert not any(rec.learned_kernels for rec in recorders[1:]), "later captures reuse what it learned"

"""Specifications for the Hypothesis strategies in ``strategies``.

Three kinds of test:

* validity: every strategy only yields values valid for its spec and support;
* reach: each kernel-breaking edge case shows up within 200 examples;
* shrinking: a failing property shrinks to the documented simplest form.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from graphsafe.contract import Batch, CaptureSpec, Support
from graphsafe.strategies import (
    batches,
    block_tables,
    capture_batches,
    capture_specs,
    decode_lengths,
    seq_lens,
    step_sequences,
)

# block boundaries at 16, 32, ...; split-KV (64) boundaries at 64, 128, 192;
# max_seq_len 200 is neither, so each edge is its own case.
SPEC = CaptureSpec(max_reqs=4, max_query_len=4, max_seq_len=200, block_size=16)
SMALL = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=64, block_size=8)

CAPTURABLE = [Support.UNIFORM_SINGLE_TOKEN_DECODE, Support.UNIFORM_BATCH, Support.ALWAYS]
supports = st.sampled_from(CAPTURABLE)

PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SHRINK = settings(
    max_examples=200, database=None, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)  # derandomized: a shrink target is a fixed fact
# Reaching an edge case needs no shrinking; skipping it keeps the file fast.
REACH = settings(SHRINK, phases=[Phase.explicit, Phase.generate])

SIMPLEST = Batch(query_lens=(1,), seq_lens=(1,), block_table=((1,),), seed=0)


def reach(strategy, predicate):
    """An example satisfying ``predicate``; ``find`` raises NoSuchExample if none in 200."""
    return find(strategy, predicate, settings=REACH)


def shrunk(strategy, predicate):
    """The example ``find`` shrinks to: the simplest one satisfying ``predicate``."""
    return find(strategy, predicate, settings=SHRINK)


def assert_valid(spec: CaptureSpec, support: Support, batch: Batch) -> None:
    """Everything the checker relies on for a drawn batch."""
    assert isinstance(batch, Batch)
    spec.validate_batch(batch)
    assert support.allows(batch)
    Batch.from_dict(batch.to_dict())  # re-runs every Batch invariant
    flat = [b for row in batch.block_table for b in row]
    assert len(flat) == len(set(flat))
    assert 0 not in flat, "block 0 is the reserved null block"
    for q, s, row in zip(batch.query_lens, batch.seq_lens, batch.block_table):
        assert 1 <= q <= spec.max_query_len
        assert q <= s <= spec.max_seq_len
        assert len(row) == math.ceil(s / spec.block_size)
    assert 0 <= batch.seed <= 2**31 - 1


def is_identity(table) -> bool:
    flat = [b for row in table for b in row]
    return flat == list(range(1, len(flat) + 1))


def seqs_of(batch_strategy):
    """All sequence lengths of a drawn batch, as a tuple."""
    return batch_strategy.map(lambda b: b.seq_lens)


# =============================================================================
# validity
# =============================================================================


@PROPERTY
@given(capture_specs())
def test_capture_specs_default_ranges(spec):
    assert spec.max_reqs in (1, 2, 4, 8, 16)
    assert 1 <= spec.max_query_len <= 4
    assert spec.block_size in (1, 4, 8, 16, 32, 64)
    assert spec.max_query_len <= spec.max_seq_len <= 512
    assert spec.num_blocks == spec.max_reqs * spec.blocks_per_seq + 1


@PROPERTY
@given(capture_specs(max_reqs=st.sampled_from([3, 6, 8])))
def test_capture_sizes_are_empty_or_powers_of_two_plus_max_reqs(spec):
    sizes = spec.capture_sizes
    if sizes:
        assert spec.max_reqs in sizes
        assert list(sizes) == sorted(set(sizes))
        for s in sizes:
            assert s == spec.max_reqs or (s < spec.max_reqs and s & (s - 1) == 0)


@PROPERTY
@given(
    capture_specs(max_reqs=8, max_query_len=2, max_seq_len=st.integers(100, 130), block_size=st.sampled_from([16, 32]))
)
def test_capture_specs_accept_values_and_strategies(spec):
    assert spec.max_reqs == 8 and spec.max_query_len == 2
    assert 100 <= spec.max_seq_len <= 130
    assert spec.block_size in (16, 32)


@PROPERTY
@given(st.data(), capture_specs(), supports)
def test_decode_lengths_are_allowed_by_their_support(data, spec, support):
    qs = data.draw(decode_lengths(support=support, spec=spec))
    assert 1 <= len(qs) <= spec.max_reqs
    assert all(1 <= q <= spec.max_query_len for q in qs)
    batch = Batch(qs, qs, tuple((i + 1,) for i in range(len(qs))))
    assert support.allows(batch)
    if support is Support.UNIFORM_SINGLE_TOKEN_DECODE:
        assert set(qs) == {1}
    if support is Support.UNIFORM_BATCH:
        assert len(set(qs)) == 1


@PROPERTY
@given(decode_lengths(support=Support.ALWAYS, spec=SPEC, num_reqs=st.integers(2, 3)))
def test_decode_lengths_honour_num_reqs(qs):
    assert len(qs) in (2, 3)


@PROPERTY
@given(st.data(), capture_specs())
def test_seq_lens_lie_between_query_len_and_max_seq_len(data, spec):
    qs = data.draw(decode_lengths(support=Support.ALWAYS, spec=spec))
    ss = data.draw(seq_lens(spec=spec, query_lens=qs, split_kv=st.sampled_from([None, 32, (48, 96)])))
    assert len(ss) == len(qs)
    for q, s in zip(qs, ss):
        assert q <= s <= spec.max_seq_len


@PROPERTY
@given(st.data(), capture_specs(), st.booleans(), st.booleans())
def test_block_tables_hold_distinct_ids_from_the_pool(data, spec, reserve, shuffle):
    ss = data.draw(seq_lens(spec=spec, query_lens=data.draw(decode_lengths(support=Support.ALWAYS, spec=spec))))
    table = data.draw(block_tables(spec=spec, seq_lens=ss, reserve_null_block=reserve, shuffle=shuffle))
    assert [len(row) for row in table] == [math.ceil(s / spec.block_size) for s in ss]
    flat = [b for row in table for b in row]
    assert len(flat) == len(set(flat))
    first = 1 if reserve else 0
    assert all(first <= b < spec.num_blocks for b in flat)
    if not shuffle:
        assert flat == list(range(first, first + len(flat)))


@PROPERTY
@given(st.data(), capture_specs(), supports)
def test_batches_fit_the_spec_and_the_support(data, spec, support):
    batch = data.draw(batches(spec, support=support))
    assert_valid(spec, support, batch)
    assert batch.num_slots == batch.num_reqs, "unpadded by default: the checker pads"


@PROPERTY
@given(batches(capture_specs(max_reqs=8), support=supports, num_reqs=st.integers(2, 3), seed=7, num_slots=6))
def test_batches_accept_strategies_for_every_argument(batch):
    assert batch.num_reqs in (2, 3)
    assert batch.num_slots == 6
    assert batch.seed == 7


@PROPERTY
@given(st.data(), capture_specs(), supports)
def test_capture_batches_are_padded_and_leave_room_past_their_lengths(data, spec, support):
    slots = data.draw(st.integers(1, spec.max_reqs))
    cap = data.draw(capture_batches(spec, support=support, num_slots=slots))
    assert_valid(spec, support, cap)
    assert cap.num_slots == slots and 1 <= cap.num_reqs <= slots
    if spec.max_query_len < spec.max_seq_len:
        assert cap.max_seq_len < spec.max_seq_len


@PROPERTY
@given(st.data(), capture_specs(), supports, st.integers(1, 3), st.integers(0, 4))
def test_step_sequences_hold_valid_batches_within_the_step_bounds(data, spec, support, lo, extra):
    steps = data.draw(step_sequences(spec, support=support, min_steps=lo, max_steps=lo + extra))
    assert lo <= len(steps) <= lo + extra
    for batch in steps:
        assert_valid(spec, support, batch)


@PROPERTY
@given(st.data(), capture_specs(), supports, st.booleans())
def test_step_sequences_replay_with_seeds_other_than_the_capture_seed(data, spec, support, beyond):
    slots = data.draw(st.integers(1, spec.max_reqs))
    seed = data.draw(st.sampled_from([0, 1, 2**31 - 1]))
    cap = data.draw(capture_batches(spec, support=support, num_slots=slots, seed=seed))
    steps = data.draw(step_sequences(spec, support=support, beyond_capture=beyond, capture_batch=cap))
    for batch in steps:
        assert_valid(spec, support, batch)
        assert batch.seed != cap.seed
        assert batch.num_reqs <= cap.num_slots


# =============================================================================
# NEVER
# =============================================================================


@pytest.mark.parametrize(
    "make",
    [
        lambda: decode_lengths(support=Support.NEVER, spec=SPEC),
        lambda: batches(SPEC, support=Support.NEVER),
        lambda: capture_batches(SPEC, support=Support.NEVER, num_slots=2),
        lambda: step_sequences(SPEC, support=Support.NEVER),
    ],
    ids=["decode_lengths", "batches", "capture_batches", "step_sequences"],
)
def test_never_support_raises_value_error_naming_never(make):
    with pytest.raises(ValueError, match="NEVER"):
        make()


def test_never_support_drawn_from_a_strategy_raises_when_drawn():
    with pytest.raises(ValueError, match="NEVER"):
        find(batches(SPEC, support=st.just(Support.NEVER)), lambda b: True, settings=SHRINK)


# =============================================================================
# reach: each edge case within 200 examples
# =============================================================================


def test_reaches_seq_len_1():
    reach(seqs_of(batches(SPEC)), lambda ss: 1 in ss)


def test_reaches_a_block_boundary():
    reach(seqs_of(batches(SPEC)), lambda ss: any(s % 16 == 0 for s in ss))


def test_reaches_one_past_a_block_boundary():
    reach(seqs_of(batches(SPEC)), lambda ss: any(s > 16 and s % 16 == 1 for s in ss))


def test_reaches_one_before_a_block_boundary():
    reach(seqs_of(batches(SPEC)), lambda ss: any(s % 16 == 15 for s in ss))


def test_reaches_the_captured_maximum_seq_len():
    reach(seqs_of(batches(SPEC)), lambda ss: SPEC.max_seq_len in ss)


@pytest.mark.parametrize("target", [99, 100, 101, 150])
def test_reaches_split_kv_boundaries_and_neighbours(target):
    # 50-token chunks: 99/100/101/150 are no block (16) or default (64) boundary.
    reach(seq_lens(spec=SPEC, query_lens=(1, 2, 3), split_kv=50), lambda ss: target in ss)


def test_reaches_default_split_kv_boundary_neighbours():
    spec = CaptureSpec(max_reqs=4, max_query_len=4, max_seq_len=200, block_size=48)
    reach(seqs_of(batches(spec)), lambda ss: 127 in ss or 129 in ss)


def test_reaches_non_uniform_decode_lengths_under_always():
    reach(decode_lengths(support=Support.ALWAYS, spec=SPEC), lambda qs: len(set(qs)) > 1)


def test_reaches_uniform_speculative_decode_lengths_under_uniform_batch():
    reach(
        decode_lengths(support=Support.UNIFORM_BATCH, spec=SPEC),
        lambda qs: len(qs) >= 2 and len(set(qs)) == 1 and qs[0] >= 2,
    )


def test_reaches_shuffled_block_tables():
    reach(batches(SPEC).map(lambda b: b.block_table), lambda t: not is_identity(t))


def test_reaches_grow_then_shrink_step_sequences():
    def grows_then_shrinks(steps):
        return any(a.num_reqs > b.num_reqs for i, a in enumerate(steps) for b in steps[i + 1 :])

    reach(step_sequences(SPEC), grows_then_shrinks)


def test_reaches_identical_consecutive_batches():
    reach(step_sequences(SPEC), lambda steps: any(a == b for a, b in zip(steps, steps[1:])))


def test_step_sequences_run_to_max_steps_in_more_than_half_the_examples():
    lengths = []

    @SHRINK
    @given(step_sequences(SPEC, max_steps=4))
    def draw_lengths(steps):
        lengths.append(len(steps))

    draw_lengths()
    full = sum(n == 4 for n in lengths) / len(lengths)
    assert full > 0.5, f"{full:.2f} of {len(lengths)} sequences were 4 steps long"


def test_reaches_uniform_and_non_uniform_batches_in_one_sequence_under_always():
    reach(
        step_sequences(SPEC, support=Support.ALWAYS),
        lambda steps: any(b.num_reqs >= 2 and b.is_uniform for b in steps) and any(not b.is_uniform for b in steps),
    )


def test_reaches_lengths_past_the_capture_batch_with_beyond_capture():
    # The capture batch sits near the maximum, so plain draws rarely pass it.
    cap = Batch(query_lens=(1,), seq_lens=(190,), block_table=(tuple(range(1, 13)),), seed=0, num_slots=2)
    steps = reach(
        step_sequences(SPEC, beyond_capture=True, capture_batch=cap),
        lambda steps: (
            all(cap.max_seq_len < s <= SPEC.max_seq_len for b in steps for s in b.seq_lens) and len(steps) >= 2
        ),
    )
    assert all(b.seed != 0 for b in steps)


# =============================================================================
# shrinking: to the documented simplest form
# =============================================================================


def test_batches_shrink_to_one_decode_token_one_block_seed_0():
    assert shrunk(batches(SPEC), lambda b: True) == SIMPLEST


def test_batches_needing_three_requests_shrink_to_three_minimal_requests():
    b = shrunk(batches(SPEC), lambda b: b.num_reqs >= 3)
    assert b == Batch(query_lens=(1, 1, 1), seq_lens=(1, 1, 1), block_table=((1,), (2,), (3,)), seed=0)


def test_batches_needing_a_long_sequence_shrink_to_one_request():
    b = shrunk(batches(SPEC), lambda b: b.max_seq_len > 100)
    assert b.num_reqs == 1 and b.query_lens == (1,) and b.seed == 0
    assert is_identity(b.block_table)


def test_step_sequences_shrink_to_a_single_minimal_step():
    assert shrunk(step_sequences(SPEC), lambda steps: True) == [SIMPLEST]


def test_step_sequences_needing_three_steps_shrink_to_three_single_token_steps():
    steps = shrunk(step_sequences(SPEC, max_steps=4), lambda steps: len(steps) >= 3)
    assert len(steps) == 3  # not max_steps: the steps that fill a sequence up shrink away
    assert all(set(b.query_lens) == {1} and b.seq_lens == b.query_lens and b.seed == 0 for b in steps)


def test_step_sequences_shrink_to_seed_1_when_the_capture_used_seed_0():
    cap = SPEC.worst_case_batch(2, seed=0)
    steps = shrunk(step_sequences(SPEC, capture_batch=cap), lambda steps: True)
    assert steps == [Batch(query_lens=(1,), seq_lens=(1,), block_table=((1,),), seed=1)]


def test_seq_lens_shrink_to_the_query_lengths():
    assert shrunk(seq_lens(spec=SPEC, query_lens=(3, 1, 4)), lambda ss: True) == (3, 1, 4)


def test_block_tables_shrink_to_identity_order():
    table = shrunk(block_tables(spec=SPEC, seq_lens=(40, 5, 17)), lambda t: True)
    assert table == ((1, 2, 3), (4,), (5, 6))


def test_uniform_batch_decode_lengths_shrink_to_single_tokens():
    assert shrunk(decode_lengths(support=Support.UNIFORM_BATCH, spec=SPEC, num_reqs=3), lambda qs: True) == (1, 1, 1)


def test_capture_specs_shrink_to_the_smallest_spec():
    spec = shrunk(capture_specs(), lambda s: True)
    assert spec == CaptureSpec(max_reqs=1, max_query_len=1, max_seq_len=1, block_size=1)


def test_capture_batches_shrink_to_one_minimal_request_padded():
    cap = shrunk(capture_batches(SMALL, num_slots=4), lambda b: True)
    assert cap == SIMPLEST.padded(4)


UNIFORM_3 = CaptureSpec(max_reqs=4, max_query_len=4, max_seq_len=64, block_size=16, uniform_query_len=3)


@PROPERTY
@given(data=st.data())
def test_a_uniform_batch_has_exactly_the_specs_uniform_query_len(data):
    qs = data.draw(decode_lengths(support=Support.UNIFORM_BATCH, spec=UNIFORM_3))
    batch = data.draw(batches(UNIFORM_3, support=Support.UNIFORM_BATCH))
    assert set(qs) == {3} and set(batch.query_lens) == {3}


@PROPERTY
@given(data=st.data())
def test_mixed_batches_ignore_the_uniform_query_len(data):
    batch = data.draw(batches(UNIFORM_3, support=Support.ALWAYS))
    assert max(batch.query_lens) <= UNIFORM_3.max_query_len

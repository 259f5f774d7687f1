"""Specifications for the batches that ``step_sequences`` and ``capture_batches`` decode from one drawn
byte string each (``strategies._encoded``): the checker's strategies reach the same edge cases, shrink
to the same simplest forms and stay as valid as the choice-by-choice ``batches`` strategy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsafe.contract import Batch, CaptureSpec, Support
from graphsafe.strategies import capture_batches, step_sequences
from graphsafe.strategies._encoded import Layout

from .test_strategies import PROPERTY, SIMPLEST, SPEC, assert_valid, capture_specs, is_identity, reach, shrunk, supports


def batches_of(steps_strategy):
    """Every batch of a drawn step sequence, flattened."""
    return steps_strategy.map(lambda steps: list(steps))


def seqs(steps):
    return [s for b in steps for s in b.seq_lens]


STEPS = step_sequences(SPEC)


# =============================================================================
# decoding
# =============================================================================


@pytest.mark.parametrize("level", [Support.UNIFORM_SINGLE_TOKEN_DECODE, Support.UNIFORM_BATCH, Support.ALWAYS])
def test_zero_bytes_decode_to_the_simplest_batch(level):
    lay = Layout(SPEC, level, 4, (64,), repeat=True, beyond=True)
    assert lay.decode(bytes(lay.size)) == (False, SIMPLEST)


def test_zero_bytes_avoid_the_capture_seed_and_keep_the_fewest_requests_allowed():
    lay = Layout(SPEC, Support.ALWAYS, 4, (64,))
    _, batch = lay.decode(bytes(lay.size), n_lo=2, avoid=0)
    assert batch == Batch(query_lens=(1, 1), seq_lens=(1, 1), block_table=((1,), (2,)), seed=1)


@PROPERTY
@given(st.data(), capture_specs(), supports, st.integers(1, 16))
def test_any_bytes_decode_to_a_valid_batch_within_the_request_bounds(data, spec, level, top):
    top = min(top, spec.max_reqs)
    lay = Layout(spec, level, top, (64,), repeat=True, beyond=True)
    n_lo = data.draw(st.integers(1, top))
    raw = data.draw(st.binary(min_size=lay.size, max_size=lay.size))
    _, batch = lay.decode(raw, n_lo=n_lo, avoid=data.draw(st.integers(0, 2**31 - 1)), beyond_lo=spec.max_seq_len)
    assert_valid(spec, level, batch)
    assert n_lo <= batch.num_reqs <= top


# =============================================================================
# reach: the edge cases of the choice-by-choice strategies, through step_sequences
# =============================================================================


def test_steps_reach_seq_len_1():
    reach(STEPS, lambda steps: 1 in seqs(steps))


@pytest.mark.parametrize("edge", [0, 1, 15], ids=["on", "one_past", "one_before"])
def test_steps_reach_block_boundaries_and_their_neighbours(edge):
    reach(STEPS, lambda steps: any(s > 16 and s % 16 == edge for s in seqs(steps)))


def test_steps_reach_the_captured_maximum_seq_len():
    reach(STEPS, lambda steps: SPEC.max_seq_len in seqs(steps))


def test_steps_reach_default_split_kv_boundary_neighbours():
    spec = CaptureSpec(max_reqs=4, max_query_len=4, max_seq_len=200, block_size=48)
    reach(step_sequences(spec), lambda steps: 127 in seqs(steps) or 129 in seqs(steps))


def test_steps_reach_non_uniform_query_lengths_under_always():
    reach(STEPS, lambda steps: any(len(set(b.query_lens)) > 1 for b in steps))


def test_steps_reach_uniform_speculative_query_lengths_under_uniform_batch():
    reach(
        step_sequences(SPEC, support=Support.UNIFORM_BATCH),
        lambda steps: any(b.num_reqs >= 2 and b.query_lens[0] >= 2 for b in steps),
    )


def test_steps_reach_shuffled_block_tables():
    reach(STEPS, lambda steps: any(not is_identity(b.block_table) for b in steps))


def test_steps_reach_the_largest_batch():
    reach(STEPS, lambda steps: any(b.num_reqs == SPEC.max_reqs for b in steps))


def test_capture_batches_reach_one_below_the_longest_sequence():
    reach(capture_batches(SPEC, num_slots=4), lambda b: SPEC.max_seq_len - 1 in b.seq_lens)


# =============================================================================
# shrinking
# =============================================================================


def test_a_step_needing_three_requests_shrinks_to_three_minimal_requests():
    steps = shrunk(STEPS, lambda steps: any(b.num_reqs >= 3 for b in steps))
    assert steps == [Batch(query_lens=(1, 1, 1), seq_lens=(1, 1, 1), block_table=((1,), (2,), (3,)), seed=0)]


def test_a_step_needing_a_long_sequence_shrinks_to_one_request_in_identity_order():
    [b] = shrunk(STEPS, lambda steps: any(b.max_seq_len > 100 for b in steps))
    assert b.num_reqs == 1 and b.query_lens == (1,) and b.seed == 0
    assert is_identity(b.block_table)


def test_growing_then_shrinking_steps_shrink_to_two_then_one_minimal_requests():
    steps = shrunk(
        STEPS, lambda steps: any(a.num_reqs > b.num_reqs for i, a in enumerate(steps) for b in steps[i + 1 :])
    )
    assert steps == [Batch(query_lens=(1, 1), seq_lens=(1, 1), block_table=((1,), (2,)), seed=0), SIMPLEST]


def test_identical_consecutive_steps_shrink_to_the_simplest_batch_twice():
    assert shrunk(STEPS, lambda steps: any(a == b for a, b in zip(steps, steps[1:]))) == [SIMPLEST, SIMPLEST]


def test_a_needed_seed_shrinks_to_the_smallest_seed_the_bytes_give_past_it():
    # a seed is one of 65536 values spread over [0, 2**31 - 1]: multiples of 2**15
    [b] = shrunk(STEPS, lambda steps: any(b.seed >= 1000 for b in steps))
    assert b == Batch(query_lens=(1,), seq_lens=(1,), block_table=((1,),), seed=2**15)


@settings(PROPERTY, max_examples=30)
@given(capture_batches(SPEC, num_slots=4, seed=st.integers(5, 9)))
def test_capture_batches_take_a_given_seed_strategy(cap):
    assert 5 <= cap.seed <= 9 and cap.num_slots == 4

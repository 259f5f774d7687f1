"""The contract: Support, CaptureSpec, Batch, Target, seeded values, capturing()."""

import json

import pytest
import torch

import graphsafe
from graphsafe import Batch, CaptureSpec, Support


def test_support_levels_have_the_serving_engines_values():
    assert [s.value for s in Support] == [0, 1, 2, 3]
    assert Support.UNIFORM_BATCH > Support.UNIFORM_SINGLE_TOKEN_DECODE


def test_support_allows_only_its_batches():
    decode = Batch((1, 1), (4, 9), ((1,), (2, 3)))
    spec_dec = Batch((3, 3), (4, 9), ((1,), (2, 3)))
    mixed = Batch((1, 3), (4, 9), ((1,), (2, 3)))
    assert Support.UNIFORM_SINGLE_TOKEN_DECODE.allows(decode)
    assert not Support.UNIFORM_SINGLE_TOKEN_DECODE.allows(spec_dec)
    assert Support.UNIFORM_BATCH.allows(spec_dec) and not Support.UNIFORM_BATCH.allows(mixed)
    assert Support.ALWAYS.allows(mixed)
    assert not Support.NEVER.allows(decode)


def test_capture_spec_defaults_num_blocks_to_a_full_batch_plus_null_block():
    spec = CaptureSpec(max_reqs=4, max_seq_len=33, block_size=16)
    assert spec.blocks_per_seq == 3
    assert spec.num_blocks == 4 * 3 + 1


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(max_reqs=0), "max_reqs"),
        (dict(max_query_len=0), "max_query_len"),
        (dict(block_size=-1), "block_size"),
        (dict(max_query_len=9, max_seq_len=8), "max_query_len"),
        (dict(num_blocks=3), "num_blocks"),
        (dict(max_reqs=2, capture_sizes=(4,)), "capture_sizes"),
        (dict(max_reqs=2.0), "max_reqs"),
    ],
)
def test_capture_spec_rejects_invalid_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        CaptureSpec(**kwargs)


def test_capture_sizes_default_to_powers_of_two_up_to_max_reqs():
    assert CaptureSpec(max_reqs=6).default_capture_sizes() == (1, 2, 4, 6)
    assert CaptureSpec(max_reqs=8, capture_sizes=(8, 2)).default_capture_sizes() == (2, 8)


def test_batch_derives_counts_and_offsets():
    b = Batch((2, 1, 3), (5, 1, 9), ((1, 2), (3,), (4, 5, 6)), seed=7)
    assert b.num_reqs == 3 and b.num_tokens == 6
    assert b.cu_query_lens == (0, 2, 3, 6)
    assert b.max_query_len == 3 and b.max_seq_len == 9
    assert not b.is_uniform
    assert b.token_owner(4) == (2, 1)
    assert b.num_slots == 3 and not b.is_padded


def test_padding_keeps_requests_and_adds_slots():
    b = Batch((1,), (3,), ((2,),), seed=1).padded(4)
    assert b.num_slots == 4 and b.is_padded and b.num_reqs == 1
    assert b.unpadded().num_slots == 1


@pytest.mark.parametrize(
    "args, field",
    [
        (((1,), (1, 2), ((1,),)), "seq_lens"),
        (((0,), (1,), ((1,),)), "query_lens"),
        (((3,), (2,), ((1,),)), "seq_lens"),
        (((1, 1), (2, 2), ((1,), (1,))), "block_table"),
        (((1,), (1,), ((1,), (2,))), "block_table"),
        (((), (), ()), "query_lens"),
    ],
)
def test_batch_rejects_invalid_values_naming_the_field(args, field):
    with pytest.raises(ValueError, match=field):
        Batch(*args)


def test_batch_rejects_fewer_slots_than_requests():
    with pytest.raises(ValueError, match="num_slots"):
        Batch((1, 1), (1, 1), ((1,), (2,)), num_slots=1)


def test_spec_validates_batches_against_its_limits():
    spec = CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, block_size=4)
    spec.validate_batch(Batch((1,), (8,), ((1, 2),)))
    with pytest.raises(ValueError, match="max_seq_len"):
        spec.validate_batch(Batch((1,), (9,), ((1, 2, 3),)))
    with pytest.raises(ValueError, match="needs"):
        spec.validate_batch(Batch((1,), (8,), ((1,),)))
    with pytest.raises(ValueError, match="num_slots"):
        spec.validate_batch(Batch((1,), (1,), ((1,),), num_slots=3))


def test_worst_case_batch_fills_every_slot_at_the_maxima():
    spec = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=20, block_size=8)
    b = spec.worst_case_batch(3)
    assert b.query_lens == (2, 2, 2) and b.seq_lens == (20, 20, 20)
    spec.validate_batch(b)
    assert 0 not in {x for row in b.block_table for x in row}


def test_batch_round_trips_through_dict():
    b = Batch((2, 1), (5, 3), ((4, 1), (2,)), seed=9, num_slots=4)
    assert Batch.from_dict(b.to_dict()) == b


def test_seeded_values_are_reproducible_and_device_independent():
    a = graphsafe.seeded((3, 4), seed=5)
    assert torch.equal(a, graphsafe.seeded((3, 4), seed=5))
    assert not torch.equal(a, graphsafe.seeded((3, 4), seed=6))
    assert graphsafe.seeded((4,), seed=1, dtype=torch.int32, low=0, high=3).max() < 3
    fp8 = graphsafe.seeded((8,), seed=5, dtype=torch.float8_e4m3fn)
    assert fp8.dtype == torch.float8_e4m3fn


@pytest.mark.cuda
def test_seeded_values_match_between_cpu_and_gpu():
    assert torch.equal(graphsafe.seeded((16, 8), seed=3), graphsafe.seeded((16, 8), seed=3, device="cuda").cpu())


def test_capturing_is_false_outside_capture():
    assert graphsafe.capturing() is False


def test_target_base_methods_say_what_is_missing():
    class Empty(graphsafe.Target):
        pass

    with pytest.raises(NotImplementedError, match="Empty.setup"):
        Empty().setup(CaptureSpec(), "cpu")
    assert Empty().static() == {}


def test_capture_spec_round_trips_through_plain_data_and_ignores_unknown_keys():
    spec = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=64, block_size=16, capture_sizes=(1, 4))
    data = spec.to_dict()
    assert data["capture_sizes"] == [1, 4] and json.loads(json.dumps(data)) == data
    assert CaptureSpec.from_dict({**data, "added_in_a_later_version": 1}) == spec


def test_a_uniform_query_len_longer_than_the_longest_query_is_a_spec_error():
    with pytest.raises(graphsafe.SpecError, match="uniform_query_len"):
        CaptureSpec(max_query_len=2, uniform_query_len=3)


def test_prepare_capture_is_prepare_unless_a_target_says_otherwise():
    calls = []

    class T(graphsafe.Target):
        def prepare(self, batch):
            calls.append(batch)

    b = Batch((1,), (3,), ((1,),))
    T().prepare_capture(b)
    assert calls == [b]

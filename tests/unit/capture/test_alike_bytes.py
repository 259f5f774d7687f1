"""``alike_bytes``: the claim experiment's test of whether a fresh value changes the bytes a probe named, where any
NaN matches any NaN (graphsafe's all-ones poison, and the canonical NaN a GPU's arithmetic makes from it)."""

from __future__ import annotations

import pytest
import torch

from graphsafe.capture.statewalk import alike_bytes

POISON = torch.tensor([0xFF, 0xFF, 0xFF, 0xFF], dtype=torch.uint8)  # one fp32 element, every bit set: a NaN


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_poison_matches_a_canonical_nan_of_its_dtype(dtype):
    size = torch.empty(0, dtype=dtype).element_size()
    poison = torch.full((2 * size,), 0xFF, dtype=torch.uint8)
    canonical = as_bytes(torch.full((2,), float("nan"), dtype=dtype))
    assert not torch.equal(poison, canonical) and alike_bytes(poison, canonical, dtype)


def test_a_nan_differs_from_a_number():
    assert not alike_bytes(POISON, as_bytes(torch.tensor([1.0])), torch.float32)


def test_negative_zero_differs_from_zero():
    assert not alike_bytes(as_bytes(torch.tensor([0.0])), as_bytes(torch.tensor([-0.0])), torch.float32)


def test_integers_compare_byte_for_byte():
    minus_one = as_bytes(torch.tensor([-1], dtype=torch.int32))
    assert torch.equal(minus_one, POISON)
    assert not alike_bytes(POISON, as_bytes(torch.tensor([7], dtype=torch.int32)), torch.int32)


def test_a_run_of_partial_elements_compares_byte_for_byte():
    canonical = as_bytes(torch.tensor([float("nan")]))
    assert not alike_bytes(POISON[:3], canonical[:3], torch.float32)
    assert alike_bytes(POISON[:3], POISON[:3].clone(), torch.float32)


def test_one_differing_element_among_nans_is_a_difference():
    a = torch.full((3,), float("nan"))
    b = a.clone()
    b[1] = 2.0
    assert not alike_bytes(as_bytes(a), as_bytes(b), torch.float32)

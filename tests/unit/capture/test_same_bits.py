"""``same_bits``: two views compared byte for byte, element by element (what the repair experiment uses to decide
whether a fresh instance holds anything else in a buffer: a buffer poisoned with NaN alike in both holds the same)."""

from __future__ import annotations

import torch

from graphsafe.capture.statewalk import same_bits


def test_a_nan_equals_the_same_nan():
    a = torch.full((4,), float("nan"))
    assert not torch.equal(a, a.clone()) and same_bits(a, a.clone())


def test_negative_zero_differs_from_zero():
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))


def test_different_values_differ():
    assert not same_bits(torch.arange(4.0), torch.arange(4.0) + 1)


def test_views_of_other_layouts_compare_element_by_element():
    base = torch.arange(12.0).reshape(3, 4)
    assert same_bits(base[:, 1], torch.tensor([1.0, 5.0, 9.0]))  # a strided column against a contiguous copy


def test_other_shapes_or_dtypes_differ():
    assert not same_bits(torch.zeros(4), torch.zeros(2, 2))
    assert not same_bits(torch.zeros(4), torch.zeros(4, dtype=torch.float64))

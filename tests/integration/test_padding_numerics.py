"""Padding that changes only the rounding of live rows (a kernel or split chosen from the padded batch's shape) is
info, numerics only; padding that changes their values is stale padding, an error; and with bitwise tolerance
any change is."""

from __future__ import annotations

import graphsafe
from tests.targets import hazards as H

EXACT = graphsafe.Tolerance(rtol=0.0, atol=0.0)  # shows the rounding differences the default tolerance hides


def check(cls, **kw):
    return graphsafe.check(cls, engine="emulate", examples=10, seed=0, database=False, **kw)


def test_a_kernel_chosen_from_the_padded_shape_is_numerics_only():
    result = check(H.kernel_choice.KernelChoiceFromPadding, tolerance=EXACT)
    assert result.ok, result.summary()
    infos = [f for f in result.findings if f.kind.value == "stale-padding"]
    assert infos and all(f.severity == "info" for f in infos), result.summary()
    assert "numerics only" in infos[0].message


def test_with_bitwise_tolerance_a_kernel_chosen_from_the_padded_shape_is_stale_padding():
    result = check(H.kernel_choice.KernelChoiceFromPadding, tolerance=graphsafe.Tolerance(bitwise=True))
    assert result.kinds == {"stale-padding"}, result.summary()


def test_padding_that_changes_values_stays_an_error():
    result = check(H.paged_decode.NanPaddingFp8Out)
    assert result.kinds == {"stale-padding"}, result.summary()
    assert "numerics only" not in result.errors[0].message

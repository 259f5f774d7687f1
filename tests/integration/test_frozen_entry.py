"""A frozen host value is named where it enters the launches (the slice by a batch-derived int), not at the first
kernel whose tensor shape it changes (the reduction that consumes the slice)."""

from __future__ import annotations

import graphsafe
from tests.targets.frozen_slice import SliceByBatchInt


def test_a_batch_derived_int_in_a_slice_is_named_at_the_slice():
    r = graphsafe.check(SliceByBatchInt, engine="emulate", examples=10, seed=0, database=False, isolate="none")
    [f] = r.errors
    assert f.kind.value == "frozen-host-value", r.summary()
    assert f.where.startswith("aten::slice"), f.summary()
    assert "frozen_slice.py" in f.message and "in forward" in f.message, f.message
    assert "aten::mean" in f.message, f.message  # the consumer is still said

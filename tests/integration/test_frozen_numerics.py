"""The numerics rule of frozen-host-value: a split count frozen at capture that changes only the order of a
reduction is info with the measured difference; one that changes the result is an error; and with bitwise
tolerance (engines that need batch-invariant results) any frozen value that changes a bit is an error."""

from __future__ import annotations

import torch

import graphsafe
from graphsafe.diagnosis.frozen import numerics_bound
from tests.targets import hazards as H

EXACT = graphsafe.Tolerance(rtol=0.0, atol=0.0)  # shows the rounding differences the default tolerance hides


def check(cls, capture="worst", **kw):
    return graphsafe.check(cls, engine="emulate", examples=6, seed=0, database=False, capture=capture, **kw)


def test_a_frozen_split_count_that_changes_only_rounding_is_info_with_the_measured_difference():
    result = check(H.split_kv.SplitCountFromBatchDeviceLen, tolerance=EXACT)
    assert result.ok, result.summary()
    infos = [f for f in result.findings if f.kind.value == "frozen-host-value"]
    assert infos and all(f.severity == "info" for f in infos)
    assert "numerics only" in infos[0].message and "differs from eager with this batch's by at most" in infos[0].message


def test_a_frozen_split_length_that_changes_the_result_is_an_error(no_shrinking):
    result = check(H.split_kv.SplitCountFromBatch, capture="minimal")  # a short capture batch: too few keys covered
    assert result.kinds == {"frozen-host-value"}
    assert all(f.severity == "error" and "numerics only" not in f.message for f in result.errors)


def test_with_bitwise_tolerance_a_frozen_value_that_changes_only_rounding_is_an_error(no_shrinking):
    result = check(H.split_kv.SplitCountFromBatchDeviceLen, tolerance=graphsafe.Tolerance(bitwise=True))
    assert result.kinds == {"frozen-host-value"}, result.summary()
    assert "numerics only" not in result.errors[0].message


def test_the_bound_is_the_output_dtypes_resolution_or_tf32s_on_a_gpu():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert numerics_bound(torch.bfloat16, cpu) == 2.0**-7
    assert numerics_bound(torch.float16, gpu) == 2.0**-10
    assert numerics_bound(torch.float32, gpu) == 2.0**-10  # TF32: 7.5e-4 was measured on an H100
    assert numerics_bound(torch.float32, cpu) < numerics_bound(torch.float32, gpu)


def test_a_kernel_chosen_on_the_host_that_only_reorders_a_reduction_is_info():
    # captured on the shortest batch (the one-pass kernel), replayed for long ones (the split-KV kernels)
    result = check(H.kernel_choice.KernelChoiceFromBatch, capture="minimal", tolerance=EXACT)
    assert result.ok, result.summary()
    infos = [f for f in result.findings if f.kind.value == "frozen-host-value"]
    assert infos and all(f.severity == "info" for f in infos), result.summary()
    assert "a graph captured for this batch replays as eager does" in infos[0].message


def test_a_kernel_chosen_on_the_host_that_drops_keys_is_an_error(no_shrinking):
    result = check(H.kernel_choice.KernelChoiceTruncating, capture="minimal")
    assert result.kinds == {"frozen-host-value"}, result.summary()
    assert "numerics only" not in result.errors[0].message

"""A graph diff becomes a frozen-host-value only where the recorded launches cannot say it: in a kernel no
recorded launch accounts for (an extension, a library reached through TVM-FFI), or a branch that launches one.
The kernels of torch's own libraries hold addresses of the graph's own temporaries that differ between two
captures; their host values are the recorded aten launches'."""

from __future__ import annotations

from graphsafe.diagnosis.frozen import concerns as _concerns


def value(kernel: str) -> dict:
    return {"kind": "argument", "kernel": kernel, "argument": "parameter 1", "captured": 1, "needed": 2}


def test_a_value_of_a_kernel_nobody_recorded_is_evidence():
    assert _concerns(value("gs_scale_rows"), {"gs_scale_rows"})


def test_a_value_of_a_kernel_the_recorder_accounts_for_is_left_to_the_recorded_launches():
    assert not _concerns(value("elementwise_kernel"), {"gs_scale_rows"})


def test_a_branch_that_launches_an_unrecorded_kernel_is_evidence():
    branch = {"kind": "branch", "kernel": "x", "captured": ["elementwise_kernel"], "needed": ["gs_scale_rows"]}
    assert _concerns(branch, {"gs_scale_rows"})


def test_a_branch_among_recorded_kernels_only_is_left_to_the_recorded_launches():
    branch = {"kind": "branch", "kernel": "x", "captured": ["elementwise_kernel"], "needed": ["reduce_kernel"]}
    assert not _concerns(branch, {"gs_scale_rows"})

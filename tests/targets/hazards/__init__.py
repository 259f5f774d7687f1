"""Hazard targets: buggy attention backends, each with a safe twin, written from the public hazard map.

Every buggy class repeats one mistake that shipped in a serving engine (see
``../shared/hazards.md``); its safe twin differs only in that mistake.

* ``EXPECTED``: buggy class -> the finding kinds graphsafe should report (the root cause).
* ``SAFE``: the safe twins (no error finding expected).
* ``TWIN_OF``: buggy class -> its safe twin.

Modules: ``paged_decode`` (plain torch decode), ``split_kv`` (Triton split-KV decode),
``varlen`` (Triton mixed prefill/decode), ``state`` (recurrent and conv state pools),
``workspace`` (workspaces and accumulators), ``spec_decode`` (speculative decoding).
Run ``python -m tests.targets.hazards.survey`` for what graphsafe reports, and
``python -m tests.targets.hazards.eager_check`` for eager correctness.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()  # before the modules below define their Triton kernels

from . import paged_decode, spec_decode, split_kv, state, varlen, workspace  # noqa: E402

TWIN_OF: dict[type, type] = {
    paged_decode.FreshSeqLens: paged_decode.PagedDecode,
    paged_decode.CachedBlockTable: paged_decode.PagedDecode,
    paged_decode.PrefixOnlyMetadata: paged_decode.PagedDecode,
    paged_decode.NanPaddingFp8Out: paged_decode.Fp8OutPagedDecode,
    paged_decode.TrimmedGather: paged_decode.PagedDecode,
    paged_decode.HostTemperature: paged_decode.DeviceTemperature,
    split_kv.SplitCountFromBatch: split_kv.SplitKVDecode,
    split_kv.LazyPlannedSplitKV: split_kv.PlannedSplitKV,
    varlen.PaddedPathMetadata: varlen.VarlenAttention,
    varlen.BatchMaxSeqlenLoop: varlen.VarlenAttention,
    varlen.DecodePrefillHostCounts: varlen.SplitDecodePrefill,
    varlen.DecodeKernelChoice: varlen.VarlenAttention,
    state.RecurrentPadSlotZero: state.RecurrentDecode,
    state.ConvPadSlotZero: state.ConvDecode,
    workspace.GrowingWorkspace: workspace.FixedWorkspace,
    workspace.AccumulatorZeroedInPrepare: workspace.SplitAccumulate,
    spec_decode.SpecDecodeZeroGuard: spec_decode.SpecDecode,
}

EXPECTED: dict[type, frozenset[str]] = {
    paged_decode.FreshSeqLens: frozenset({"stale-pointer"}),
    paged_decode.CachedBlockTable: frozenset({"stale-pointer"}),
    paged_decode.PrefixOnlyMetadata: frozenset({"stale-padding"}),
    paged_decode.NanPaddingFp8Out: frozenset({"stale-padding"}),
    paged_decode.TrimmedGather: frozenset({"capture-failure"}),
    paged_decode.HostTemperature: frozenset({"frozen-host-value"}),
    split_kv.SplitCountFromBatch: frozenset({"frozen-host-value"}),
    split_kv.LazyPlannedSplitKV: frozenset({"lazy-init"}),
    varlen.PaddedPathMetadata: frozenset({"unpersisted-metadata"}),
    varlen.BatchMaxSeqlenLoop: frozenset({"frozen-host-value"}),
    varlen.DecodePrefillHostCounts: frozenset({"frozen-host-value"}),
    varlen.DecodeKernelChoice: frozenset({"frozen-host-value"}),
    state.RecurrentPadSlotZero: frozenset({"stale-padding"}),
    state.ConvPadSlotZero: frozenset({"stale-padding"}),
    workspace.GrowingWorkspace: frozenset({"stale-pointer"}),
    workspace.AccumulatorZeroedInPrepare: frozenset({"nondeterministic-replay"}),
    spec_decode.SpecDecodeZeroGuard: frozenset({"stale-padding"}),
}

SAFE: list[type] = [
    paged_decode.PagedDecode,
    paged_decode.Fp8OutPagedDecode,
    paged_decode.DeviceTemperature,
    split_kv.SplitKVDecode,
    split_kv.SplitCountFromBatchDeviceLen,
    split_kv.PlannedSplitKV,
    varlen.VarlenAttention,
    varlen.SplitDecodePrefill,
    state.RecurrentDecode,
    state.ConvDecode,
    workspace.FixedWorkspace,
    workspace.SplitAccumulate,
    spec_decode.SpecDecode,
]

# SplitCountFromBatchDeviceLen is the safe-ish variant of SplitCountFromBatch (a frozen host
# split count that does not change the result); it has no buggy twin of its own.

#: bugs that only a capture other than the worst case, largest first, shows: a minimal or drawn capture
#: batch (the frozen host values) or capture order (the growing workspace)
CAPTURE_DEPENDENT: list[type] = [
    varlen.BatchMaxSeqlenLoop,
    varlen.DecodePrefillHostCounts,
    varlen.DecodeKernelChoice,
    workspace.GrowingWorkspace,
]


def label(cls: type) -> str:
    """``module:Class`` within this package (``varlen:BatchMaxSeqlenLoop``)."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}:{cls.__name__}"


__all__ = ["EXPECTED", "SAFE", "TWIN_OF", "CAPTURE_DEPENDENT", "label"]

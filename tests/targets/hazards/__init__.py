"""Hazard targets: buggy attention backends, each with a safe twin, written from the public hazard map.

Every buggy class repeats one mistake that shipped in a serving engine (the hazard list with its public
references is ``docs/explanation/hazards.md``); its safe twin differs only in that mistake.

* ``EXPECTED``: buggy class -> the finding kinds graphsafe should report (the root cause).
* ``SAFE``: the safe twins (no error finding expected).
* ``TWIN_OF``: buggy class -> its safe twin.
* ``CAUSES``: buggy class -> the buffer its finding must name (its ``cause``, container indices
  dropped) and, for metadata written into the wrong buffer, where this step's values went.

Modules: ``paged_decode`` (plain torch decode), ``split_kv`` (Triton split-KV decode), ``kernel_choice`` (a kernel chosen on the host),
``varlen`` (Triton mixed prefill/decode), ``state`` (recurrent and conv state pools),
``workspace`` (workspaces and accumulators), ``spec_decode`` (speculative decoding),
``wrong_buffer`` (metadata written into a persistent buffer the graph does not read),
``lazy_guard`` (builders behind a have-initialised flag) and ``accumulate`` (buffers the
graph reads and writes across replays).
Run ``python -m tests.targets.hazards.survey`` for what graphsafe reports, and
``python -m tests.targets.hazards.eager_check`` for eager correctness.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()  # before the modules below define their Triton kernels

from . import (  # noqa: E402
    accumulate,
    kernel_choice,
    lazy_guard,
    paged_decode,
    spec_decode,
    split_kv,
    state,
    varlen,
    workspace,
    wrong_buffer,
)

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
    kernel_choice.KernelChoiceTruncating: kernel_choice.KernelChoiceFromBatch,
    state.RecurrentPadSlotZero: state.RecurrentDecode,
    state.ConvPadSlotZero: state.ConvDecode,
    workspace.GrowingWorkspace: workspace.FixedWorkspace,
    workspace.AccumulatorZeroedInPrepare: workspace.SplitAccumulate,
    spec_decode.SpecDecodeZeroGuard: spec_decode.SpecDecode,
    wrong_buffer.PingPongMetadata: wrong_buffer.PingPongStaging,
    wrong_buffer.PingPongPackedVarlen: wrong_buffer.PingPongPackedStaging,
    wrong_buffer.MetadataOfBatchSize: wrong_buffer.PerSizeMetadata,
    wrong_buffer.PlanOnEagerWrapper: wrong_buffer.WrapperPair,
    lazy_guard.LazyTokenMetadata: lazy_guard.TokenMetadataOnDevice,
    lazy_guard.LazyPlanClearedInPrepare: lazy_guard.PlanClearedInPrepare,
    accumulate.SplitKAccumulateInPrepare: accumulate.SplitKAccumulate,
    accumulate.LazyZeroedSplitK: accumulate.SplitKAccumulate,
    accumulate.SplitKAccumulateNeverReset: accumulate.SplitKAccumulate,
    accumulate.LazyZeroedAccumulator: workspace.SplitAccumulate,
    accumulate.TileCounterInPrepare: accumulate.TileCounter,
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
    kernel_choice.KernelChoiceTruncating: frozenset({"frozen-host-value"}),
    state.RecurrentPadSlotZero: frozenset({"stale-padding"}),
    state.ConvPadSlotZero: frozenset({"stale-padding"}),
    workspace.GrowingWorkspace: frozenset({"stale-pointer"}),
    workspace.AccumulatorZeroedInPrepare: frozenset({"nondeterministic-replay"}),
    spec_decode.SpecDecodeZeroGuard: frozenset({"stale-padding"}),
    wrong_buffer.PingPongMetadata: frozenset({"unpersisted-metadata"}),
    wrong_buffer.PingPongPackedVarlen: frozenset({"unpersisted-metadata"}),
    wrong_buffer.MetadataOfBatchSize: frozenset({"unpersisted-metadata"}),
    wrong_buffer.PlanOnEagerWrapper: frozenset({"unpersisted-metadata"}),
    lazy_guard.LazyTokenMetadata: frozenset({"lazy-init"}),
    lazy_guard.LazyPlanClearedInPrepare: frozenset({"lazy-init"}),
    accumulate.SplitKAccumulateInPrepare: frozenset({"nondeterministic-replay"}),
    accumulate.LazyZeroedSplitK: frozenset({"lazy-init"}),
    accumulate.SplitKAccumulateNeverReset: frozenset({"unpersisted-metadata"}),
    accumulate.LazyZeroedAccumulator: frozenset({"lazy-init"}),
    accumulate.TileCounterInPrepare: frozenset({"nondeterministic-replay"}),
}

#: buggy class -> (cause with container indices dropped, a buffer the finding says this step's values went to;
#: "a|b" where either is right)
CAUSES: dict[type, tuple[str, str | None]] = {
    wrong_buffer.PingPongMetadata: (  # either copy's field the shrunk example reads stale
        "buffer:self.meta[].block_table|buffer:self.meta[].seq_lens",
        "self.meta[].block_table|self.meta[].seq_lens",
    ),
    wrong_buffer.PingPongPackedVarlen: ("buffer:self.tok_meta", "self.tok_meta[]"),
    wrong_buffer.MetadataOfBatchSize: ("buffer:self.by_size[].block_table", "self.by_size[].block_table"),
    wrong_buffer.PlanOnEagerWrapper: ("buffer:self.graph_wrapper.kv_indices", "self.eager_wrapper.kv_indices"),
    lazy_guard.LazyTokenMetadata: ("buffer:self.token_req", None),
    lazy_guard.LazyPlanClearedInPrepare: ("buffer:self.eager_state.split_start", None),
    accumulate.SplitKAccumulateInPrepare: ("buffer:self.acc", None),
    accumulate.LazyZeroedSplitK: ("buffer:self.acc", None),
    accumulate.SplitKAccumulateNeverReset: ("buffer:self.acc", None),
    accumulate.LazyZeroedAccumulator: ("buffer:self.acc", None),
    accumulate.TileCounterInPrepare: ("buffer:self.counter", None),
    workspace.AccumulatorZeroedInPrepare: ("buffer:self.acc", None),
}

SAFE: list[type] = [
    paged_decode.PagedDecode,
    paged_decode.Fp8OutPagedDecode,
    paged_decode.DeviceTemperature,
    split_kv.SplitKVDecode,
    split_kv.SplitCountFromBatchDeviceLen,
    split_kv.PlannedSplitKV,
    kernel_choice.KernelChoiceFromBatch,
    varlen.VarlenAttention,
    varlen.SplitDecodePrefill,
    state.RecurrentDecode,
    state.ConvDecode,
    workspace.FixedWorkspace,
    workspace.SplitAccumulate,
    spec_decode.SpecDecode,
    wrong_buffer.PingPongStaging,
    wrong_buffer.PingPongPackedStaging,
    wrong_buffer.PerSizeMetadata,
    wrong_buffer.WrapperPair,
    lazy_guard.TokenMetadataOnDevice,
    lazy_guard.PlanClearedInPrepare,
    accumulate.SplitKAccumulate,
    accumulate.TileCounter,
    accumulate.TileCounterResetAfter,
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


__all__ = ["EXPECTED", "SAFE", "TWIN_OF", "CAUSES", "CAPTURE_DEPENDENT", "label"]

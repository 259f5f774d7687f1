"""Deliberate mistakes in vLLM's own attention classes, each a subclass of the real builder or impl.

Each mistake is a mixin put in front of the backend's class (``builder_mixins`` / ``impl_mixins``), so the
same few lines run on vLLM and on the stand-in.  Written from the seed bugs and the public hazard map: each
class says what it models and the kind graphsafe must report (``expected``); ``TWIN_OF`` in
:mod:`graphsafe.vllm` names its safe twin, the backend as shipped.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from .targets import FlexAttention, TritonAttention, TritonMLA

__all__ = [
    "LiveSlotsOnly",
    "NonCausalDecodes",
    "FreshDecodeTensors",
    "FreshSeqLens",
    "RowPlanBuffer",
    "LazyRowPlan",
    "FreshBlockIndices",
    "TritonAttentionStalePadSlots",
    "TritonAttentionDecodeShortcut",
    "TritonAttentionFreshSeqLens",
    "TritonMLAFreshDecodeMetadata",
    "TritonMLALazyRowPlan",
    "FlexAttentionFreshBlockMask",
]

if TYPE_CHECKING:
    # What the mixins use of the class they are put in front of (vLLM's builder or impl, or the stand-in's):
    # vLLM is not importable where the types are checked, so these declare it.  At run time the mixins derive
    # from object alone, and ``super()`` is the backend's class in the combined class's MRO.

    class _Builder:
        vllm_config: Any
        device: torch.device

        def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any: ...

        def _build_decode(self, *args: Any, **kwargs: Any) -> Any: ...

    class _Impl:
        def forward(
            self, layer: Any, query: Any, key: Any, value: Any, kv_cache: Any, attn_metadata: Any, *args: Any, **kw: Any
        ) -> Any: ...

        def forward_mqa(self, q: Any, kv_c_and_k_pe_cache: Any, attn_metadata: Any, layer: Any) -> Any: ...

else:
    _Builder = _Impl = object


class LiveSlotsOnly(_Builder):
    """Builder mixin, buggy: keeps a slot mapping of its own for the graph and copies in the live tokens' slots
    only; padded token rows keep the slots an earlier, larger batch wrote there."""

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
        md = super().build(common_prefix_len, common_attn_metadata, fast_build)
        buf = getattr(self, "persistent_slot_mapping", None)
        if buf is None:
            rows = self.vllm_config.scheduler_config.max_num_batched_tokens
            buf = self.persistent_slot_mapping = torch.full((rows,), -1, dtype=torch.int64, device=self.device)
        live = int(common_attn_metadata.query_start_loc_cpu[-1])  # the live tokens (the runner pads past them)
        buf[:live].copy_(common_attn_metadata.slot_mapping[:live])  # BUG: the padded rows are not reset to -1
        md.slot_mapping = buf[: common_attn_metadata.num_actual_tokens]
        return md


class NonCausalDecodes(_Impl):
    """Impl mixin, buggy: a batch of single-token queries (``max_query_len == 1``, decided from this batch on the
    host) runs without the causal mask, a shortcut that changes nothing for decodes alone; a graph captured
    on such a batch keeps it for later batches with prefills."""

    def forward(
        self, layer: Any, query: Any, key: Any, value: Any, kv_cache: Any, attn_metadata: Any, *args: Any, **kw: Any
    ) -> Any:
        if attn_metadata.max_query_len == 1:  # BUG: a branch on this batch's longest query, frozen at capture
            attn_metadata = dataclasses.replace(attn_metadata, causal=False)
        return super().forward(layer, query, key, value, kv_cache, attn_metadata, *args, **kw)


class FreshDecodeTensors(_Builder):
    """MLA builder mixin, buggy: the decode metadata's block table and sequence lengths are new tensors every
    build instead of views of the runner's persistent buffers."""

    def _build_decode(self, *args: Any, **kwargs: Any) -> Any:
        decode = super()._build_decode(*args, **kwargs)
        decode.block_table = decode.block_table.clone()  # BUG: freed when the next build replaces it
        decode.seq_lens = decode.seq_lens.clone()
        return decode


class FreshSeqLens(_Builder):
    """Builder mixin, buggy: the metadata's sequence lengths are a copy made every build instead of a view of the
    runner's persistent buffer."""

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
        md = super().build(common_prefix_len, common_attn_metadata, fast_build)
        md.seq_lens = md.seq_lens.clone()  # BUG: freed when the next build replaces this metadata
        return md


class RowPlanBuffer(_Builder):
    """MLA builder mixin (with :class:`LazyRowPlan`): a persistent per-row key-count plan in every metadata,
    marked not planned yet."""

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
        md = super().build(common_prefix_len, common_attn_metadata, fast_build)
        if getattr(self, "row_lens_plan", None) is None:
            rows = self.vllm_config.scheduler_config.max_num_batched_tokens
            self.row_lens_plan = torch.zeros(rows, dtype=torch.int32, device=self.device)
        md.row_lens_plan = self.row_lens_plan[: common_attn_metadata.num_actual_tokens]
        md.row_plan_ready = False
        return md


class LazyRowPlan(_Impl):
    """MLA impl mixin, buggy: ``forward_mqa`` plans each decode row's key count into the metadata's plan buffer
    on its first call with that metadata only, then decodes row by row from the plan."""

    def forward_mqa(self, q: Any, kv_c_and_k_pe_cache: Any, attn_metadata: Any, layer: Any) -> Any:
        rows = q.shape[0]
        table, lens = attn_metadata.decode.block_table, attn_metadata.decode.seq_lens
        per_req = rows // lens.shape[0]
        owner = torch.arange(rows, device=lens.device) // per_req
        if not attn_metadata.row_plan_ready:  # BUG: a warm-up plans, and its capture skips the planning
            offset = torch.arange(rows, device=lens.device) % per_req - (per_req - 1)
            attn_metadata.row_lens_plan.copy_((lens[owner] + offset).clamp(min=0))
            attn_metadata.row_plan_ready = True
        by_row = dataclasses.replace(
            attn_metadata.decode, block_table=table[owner], seq_lens=attn_metadata.row_lens_plan
        )
        return super().forward_mqa(q, kv_c_and_k_pe_cache, dataclasses.replace(attn_metadata, decode=by_row), layer)


class FreshBlockIndices(_Builder):
    """FLEX builder mixin, buggy: drops the persistent block-index buffer before every build, so the build
    allocates a new one (for this batch) instead of copying into the one the graph captured."""

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
        self.persistent_kv_indices = None  # BUG: vLLM allocates it once, when it is None
        return super().build(common_prefix_len, common_attn_metadata, fast_build)


class TritonAttentionStalePadSlots(TritonAttention):
    """Buggy TRITON_ATTN builder: padded token rows keep stale slots (:class:`LiveSlotsOnly`), so the cache
    write of a graph replayed for a smaller batch puts the padded rows' keys into blocks that now belong to
    live requests (vLLM #57156's dummy batches poisoning the cache; the seed of vLLM #39458: a tail past
    the live rows that nobody reset).  Expected: stale-padding."""

    name = "vllm:TRITON_ATTN:stale_pad_slots"
    expected = "stale-padding"
    builder_mixins = (LiveSlotsOnly,)


class TritonAttentionDecodeShortcut(TritonAttention):
    """Buggy TRITON_ATTN impl: batches of decodes alone run without the causal mask (:class:`NonCausalDecodes`);
    a graph captured on such a batch (vLLM's runner captures with dummy decode batches) serves later mixed
    batches without it, and their prefill tokens attend to keys after them (a host branch on
    ``max_query_len`` frozen at capture, as vLLM #20301's FA3 ``num_splits``).  Expected: frozen-host-value."""

    name = "vllm:TRITON_ATTN:decode_shortcut"
    expected = "frozen-host-value"
    impl_mixins = (NonCausalDecodes,)


class TritonAttentionFreshSeqLens(TritonAttention):
    """Buggy TRITON_ATTN builder: the sequence lengths the kernel reads are a new tensor every build
    (:class:`FreshSeqLens`); replays read the capture's, freed (metadata built fresh instead of copied into a
    persistent buffer, the shape of vLLM #35175 and #36298 in the standard attention path).  Expected:
    stale-pointer."""

    name = "vllm:TRITON_ATTN:fresh_seq_lens"
    expected = "stale-pointer"
    builder_mixins = (FreshSeqLens,)


class TritonMLAFreshDecodeMetadata(TritonMLA):
    """Buggy TRITON_MLA builder: fresh decode block table and sequence lengths every build
    (:class:`FreshDecodeTensors`); replays read the capture's freed tensors (the seed of vLLM #35175:
    FP8 FlashMLA metadata returned new every step instead of copied into its persistent buffers).
    Expected: stale-pointer."""

    name = "vllm:TRITON_MLA:fresh_decode_metadata"
    expected = "stale-pointer"
    builder_mixins = (FreshDecodeTensors,)


class TritonMLALazyRowPlan(TritonMLA):
    """Buggy TRITON_MLA impl: each decode row's key count is planned behind a have-planned flag on the
    metadata (:class:`LazyRowPlan`); the warm-up plans, the capture of the same metadata skips the planning,
    and every replay reads the warm-up's plan (the seed of vLLM #44253: FlashMLA's lazily initialised
    scheduler metadata).  Expected: lazy-init."""

    name = "vllm:TRITON_MLA:lazy_row_plan"
    expected = "lazy-init"
    builder_mixins = (RowPlanBuffer,)
    impl_mixins = (LazyRowPlan,)


class FlexAttentionFreshBlockMask(FlexAttention):
    """Buggy FLEX_ATTENTION builder: a new block-index buffer every build (:class:`FreshBlockIndices`); the
    graph reads the capture's, freed (the seed of vLLM #36298: block-mask metadata must be copied into
    persistent buffers sized for the maximum).  Expected: stale-pointer."""

    name = "vllm:FLEX_ATTENTION:fresh_block_mask"
    expected = "stale-pointer"
    builder_mixins = (FreshBlockIndices,)

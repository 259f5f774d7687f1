"""Deliberate mistakes in driving FlashInfer under CUDA graphs, each a few lines away from a safe target.

Written from the public reports of such mistakes (the hazard list in the documentation, FlashInfer section);
each class says what it models and which finding kind graphsafe must report (``expected``).  Their
safe twins are :class:`~graphsafe.flashinfer.targets.Decode`, :class:`DecodeTensorCores`,
and :class:`~graphsafe.flashinfer.targets.MLA`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from ..contract import Batch, CaptureSpec, Support
from .targets import MLA, Decode, Layout

__all__ = [
    "DecodeTensorCores",
    "DecodeDefaultMode",
    "DecodeGrowingWorkspace",
    "DecodeStalePadding",
    "DecodeFixedSplit",
    "MLAMixedBatches",
]


class DecodeTensorCores(Decode):
    """Safe: tensor-core decode (FlashInfer's prefill kernels at one query row per request)."""

    name = "flashinfer:decode:tensor_cores"
    wrapper_kwargs: ClassVar[dict] = {"use_tensor_cores": True}


class DecodeDefaultMode(Decode):
    """Buggy: the wrappers are built in FlashInfer's default mode (``use_cuda_graph=False``) and captured.

    In that mode every ``plan()`` rebinds the wrapper's index buffers to tensors made from this step's
    metadata; the graph keeps reading the ones it captured, which the rebinding freed (FlashInfer #3904,
    #3928; vLLM #48167).  Expected: stale-pointer, naming the wrapper's ``_paged_kv_indptr_buf``.
    """

    name = "flashinfer:decode:default_mode"
    expected = "stale-pointer"
    use_cuda_graph = False


class DecodeGrowingWorkspace(Decode):
    """Buggy: one float workspace shared by the wrappers of every graph size, sized for the largest size
    seen so far and replaced (``reset_workspace_buffer`` on every wrapper) when a larger one is captured.

    Captured largest first, nothing ever grows; captured ascending, each larger capture frees the
    workspace the smaller graphs captured (FlashInfer PR #4553's ``resize_`` of a shared workspace, PR #5177's
    capture-time sizing).  Expected: stale-pointer, under ascending capture only.
    """

    name = "flashinfer:decode:growing_workspace"
    expected = "stale-pointer"

    def make_workspace(self) -> torch.Tensor:
        self.workspace_for = 0
        return self.sized_workspace(0)

    def sized_workspace(self, size: int) -> torch.Tensor:
        """A workspace for graphs of up to ``size`` slots (FlashInfer's split-KV partials need a few MiB)."""
        return torch.zeros((self.workspace_mib + size) << 20, dtype=torch.uint8, device=self.device)

    def make_wrapper(self, size: int) -> Any:
        if size > self.workspace_for:  # BUG: a bigger workspace replaces the one earlier graphs captured
            self.workspace_for = size
            self.workspace = self.sized_workspace(size)
            for w in self.wrappers.values():
                w.reset_workspace_buffer(self.workspace, w._int_workspace_buffer)
        return super().make_wrapper(size)


class DecodeStalePadding(Decode):
    """Buggy: the slot buffer of the new tokens is written for the live tokens only.

    Padded token rows keep the slots of an earlier, larger batch (the capture batch, say) and write their
    new keys and values into pages that now belong to live requests (vLLM #57156, dummy batches poisoning
    the cache; FlashInfer #4002: padded entries nobody rewrote).  Expected: stale-padding.
    """

    name = "flashinfer:decode:stale_padding"
    expected = "stale-padding"

    def write_tokens(self, batch: Batch, lay: Layout) -> None:
        rows = self.slot_mapping[lay.rows :].clone()
        padded = self.slot_mapping[batch.num_tokens : lay.rows].clone()
        super().write_tokens(batch, lay)
        self.slot_mapping[batch.num_tokens : lay.rows].copy_(padded)  # BUG: the padded rows keep old slots
        self.slot_mapping[lay.rows :].copy_(rows)


class DecodeFixedSplit(DecodeTensorCores):
    """Buggy: ``fixed_split_size`` (FlashInfer's batch-invariance control) set from this batch's longest
    sequence, on tensor-core decode.

    Whether the plan splits the KV (``plan_info.split_kv``) then follows the batch, and the graph keeps the
    capture batch's: captured with short sequences (a minimal capture batch), it runs later long batches
    unsplit, each KV chunk overwriting the last (FlashInfer #4647; its docs: "compatibility with CUDA
    graph is NOT guaranteed").  Expected: frozen-host-value, under minimal or drawn capture.
    """

    name = "flashinfer:decode:fixed_split"
    expected = "frozen-host-value"

    def plan(self, wrapper: Any, lay: Layout) -> None:
        longest = int((lay.kv_indptr[1:] - lay.kv_indptr[:-1]).max())
        split = max(1, math.ceil(longest / 2))  # BUG: from this batch, not from the engine's maximum
        wrapper.plan(
            lay.kv_indptr,
            lay.kv_indices,
            lay.last_page_len,
            self.num_qo_heads,
            self.num_kv_heads,
            self.head_dim,
            self.spec.block_size,
            q_data_type=self.dtype,
            kv_data_type=self.dtype,
            fixed_split_size=split,
        )


class MLAMixedBatches(MLA):
    """Buggy: MLA graphs serving mixed prefill and decode batches, the query sized by this batch.

    FlashInfer's MLA planner picks its grid (cluster size, number of clusters: ``plan_info.num_blks_x`` and
    ``num_blks_y``) from the batch's average query length, and its docs say query offsets and lengths must
    stay fixed after graph planning; this backend passes ``q[:num_tokens]`` and the batch's own offsets, so
    the graph keeps the capture batch's grid and query rows.  Expected: frozen-host-value.
    """

    name = "flashinfer:mla:mixed_batches"
    expected = "frozen-host-value"
    support = Support.ALWAYS
    default_spec = CaptureSpec(max_reqs=4, max_query_len=8, max_seq_len=128, block_size=16)
    padded_request_rows = 0

"""Deliberate mistakes in SGLang's own attention backend, each a mixin put in front of SGLang's real
``TritonAttnBackend`` (``backend_mixins``), so the same few lines run on SGLang and on the stand-in.

They use only what SGLang's CUDA-graph interface and the Triton backend's metadata expose:
``init_forward_metadata_out_graph`` (``in_capture`` tells capture from replay), ``init_forward_metadata``
(eager), ``forward_decode`` and ``forward_metadata.kv_indptr``.  Written from SGLang's history and the public
hazard map: each class says what it models and the kind graphsafe must report (``expected``); ``TWIN_OF`` in
:mod:`graphsafe.sglang` names its safe twin, the backend as shipped.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

from .targets import TritonAttention

__all__ = [
    "ReplaySkipsUpdate",
    "FreshKvIndptr",
    "LazyKvIndptr",
    "LiveRowsOnlyWriteLocs",
    "ShortSeqShortcut",
    "TritonReplaySkipsUpdate",
    "TritonFreshKvIndptr",
    "TritonLazyKvIndptr",
    "TritonStalePadLocs",
    "TritonShortSeqShortcut",
]

if TYPE_CHECKING:
    # What the mixins use of the backend they are put in front of (SGLang's or the stand-in's): SGLang is not
    # importable where the types are checked, so this declares it.  At run time the mixins derive from object,
    # and ``super()`` is the backend's class in the combined class's MRO.

    class _Backend:
        forward_metadata: Any
        kv_indptr: torch.Tensor
        device: torch.device
        token_to_kv_pool: Any

        def init_forward_metadata(self, forward_batch: Any) -> None: ...

        def init_forward_metadata_out_graph(self, forward_batch: Any, in_capture: bool = False) -> None: ...

        def forward_decode(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, *a: Any, **kw: Any) -> Any: ...

else:
    _Backend = object


class ReplaySkipsUpdate(_Backend):
    """Buggy: the replay path refreshes the metadata buffers only when the padded batch size changed since the
    last preparation (the capture path always refreshes them), so a replay at the size last prepared reads the
    previous batch's KV index rails."""

    def init_forward_metadata_out_graph(self, forward_batch: Any, in_capture: bool = False) -> None:
        size = forward_batch.batch_size
        if not in_capture and getattr(self, "prepared_size", None) == size:
            return  # BUG: "nothing changed": the capture and replay paths diverge
        self.prepared_size = size
        super().init_forward_metadata_out_graph(forward_batch, in_capture)


class FreshKvIndptr(_Backend):
    """Buggy: after each metadata preparation the KV index pointer is a new tensor (a copy of the backend's
    persistent one) instead of a view of it; the graph reads the capture's, freed by the next preparation."""

    def init_forward_metadata_out_graph(self, forward_batch: Any, in_capture: bool = False) -> None:
        super().init_forward_metadata_out_graph(forward_batch, in_capture)
        rows = forward_batch.batch_size
        self.forward_metadata.kv_indptr = self.kv_indptr[: rows + 1].clone()  # BUG: a fresh tensor every preparation


class LazyKvIndptr(_Backend):
    """Buggy: ``forward_decode`` copies the KV index pointer into a persistent plan buffer behind a
    have-planned flag that each metadata preparation clears; the warm-up plans, the capture of the same
    metadata skips the planning, and every replay reads the warm-up's plan."""

    def init_forward_metadata(self, forward_batch: Any) -> None:
        super().init_forward_metadata(forward_batch)
        self.indptr_planned = False

    def init_forward_metadata_out_graph(self, forward_batch: Any, in_capture: bool = False) -> None:
        super().init_forward_metadata_out_graph(forward_batch, in_capture)
        self.indptr_planned = False

    def forward_decode(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, *a: Any, **kw: Any) -> Any:
        md = self.forward_metadata
        if not getattr(self, "indptr_planned", False):  # BUG: a warm-up plans, and its capture skips the planning
            plan = getattr(self, "indptr_plan", None)
            if plan is None or plan.numel() < md.kv_indptr.numel():
                plan = self.indptr_plan = torch.zeros(
                    md.kv_indptr.numel() + 64, dtype=md.kv_indptr.dtype, device=md.kv_indptr.device
                )
            n = md.kv_indptr.numel()
            plan[:n].copy_(md.kv_indptr)
            md.kv_indptr = plan[:n]
            self.indptr_planned = True
        return super().forward_decode(q, k, v, layer, forward_batch, *a, **kw)


class LiveRowsOnlyWriteLocs(_Backend):
    """Buggy: the backend keeps its own persistent cache-write locations and copies in the live rows' only
    (``batch_size - num_padding``); padded rows keep the slots an earlier, larger batch wrote there, and write
    their keys and values into cache slots that now belong to live requests."""

    def _stage(self, forward_batch: Any) -> None:
        rows = forward_batch.batch_size
        live = rows - int(getattr(forward_batch, "num_padding", 0) or 0)
        locs = getattr(self, "write_locs", None)
        if locs is None or locs.numel() < rows:
            locs = self.write_locs = torch.zeros(
                max(rows, 64), dtype=torch.int64, device=forward_batch.out_cache_loc.device
            )
        locs[:live].copy_(forward_batch.out_cache_loc[:live])  # BUG: padded rows are not reset to the pad slot

    def init_forward_metadata(self, forward_batch: Any) -> None:
        super().init_forward_metadata(forward_batch)
        self._stage(forward_batch)

    def init_forward_metadata_out_graph(self, forward_batch: Any, in_capture: bool = False) -> None:
        super().init_forward_metadata_out_graph(forward_batch, in_capture)
        self._stage(forward_batch)

    def forward_decode(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, *a: Any, **kw: Any) -> Any:
        batch = copy.copy(forward_batch)
        batch.out_cache_loc = self.write_locs[: q.shape[0]]
        return super().forward_decode(q, k, v, layer, batch, *a, **kw)


class ShortSeqShortcut(_Backend):
    """Buggy: a batch whose every sequence holds only its new token (decided on the host from
    ``seq_lens_cpu``) skips attention, since each query then sees only its own key and the output is that
    token's value; SGLang's runner captures on dummy batches of exactly such sequences (the fill value 1), so
    the graph keeps the shortcut for every later batch."""

    def forward_decode(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, *a: Any, **kw: Any) -> Any:
        if int(forward_batch.seq_lens_cpu.max()) <= 1:  # BUG: a host branch on this batch, frozen at capture
            self.token_to_kv_pool.set_kv_buffer(layer, forward_batch.out_cache_loc, k, v)
            group = layer.tp_q_head_num // layer.tp_k_head_num
            return v.repeat_interleave(group, dim=1).reshape(q.shape[0], -1).to(q.dtype)
        return super().forward_decode(q, k, v, layer, forward_batch, *a, **kw)


class TritonReplaySkipsUpdate(TritonAttention):
    """Buggy Triton backend: the replay path skips the metadata refresh its capture path does
    (:class:`ReplaySkipsUpdate`; SGLang's capture and replay metadata paths that diverged).
    Expected: unpersisted-metadata."""

    name = "sglang:triton:replay_skips_update"
    expected = "unpersisted-metadata"
    backend_mixins = (ReplaySkipsUpdate,)


class TritonFreshKvIndptr(TritonAttention):
    """Buggy Triton backend: a fresh KV index pointer every preparation (:class:`FreshKvIndptr`; metadata built
    fresh instead of copied into the persistent buffers).  Expected: stale-pointer."""

    name = "sglang:triton:fresh_kv_indptr"
    expected = "stale-pointer"
    backend_mixins = (FreshKvIndptr,)


class TritonLazyKvIndptr(TritonAttention):
    """Buggy Triton backend: the KV index pointer planned on first use behind a flag (:class:`LazyKvIndptr`;
    SGLang's workspace sized lazily on first use).  Expected: lazy-init."""

    name = "sglang:triton:lazy_kv_indptr"
    expected = "lazy-init"
    backend_mixins = (LazyKvIndptr,)


class TritonStalePadLocs(TritonAttention):
    """Buggy Triton backend: padded rows write at stale cache locations (:class:`LiveRowsOnlyWriteLocs`;
    SGLang's padded slot written into live state).  Expected: stale-padding."""

    name = "sglang:triton:stale_pad_locs"
    expected = "stale-padding"
    backend_mixins = (LiveRowsOnlyWriteLocs,)


class TritonShortSeqShortcut(TritonAttention):
    """Buggy Triton backend: a host shortcut for batches of one-token sequences (:class:`ShortSeqShortcut`),
    frozen by a capture on SGLang's dummy batch.  Expected: frozen-host-value."""

    name = "sglang:triton:short_seq_shortcut"
    expected = "frozen-host-value"
    backend_mixins = (ShortSeqShortcut,)

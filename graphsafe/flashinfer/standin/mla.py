"""Stand-in of FlashInfer's ``BatchMLAPagedAttentionWrapper`` (FA-style backend, split query and KV).

As FlashInfer's FA2/FA3 MLA planner, ``plan()`` balances work items over clusters of CTAs and writes
them into the int workspace; the launch grid (cluster size, number of clusters) is a host value of the
plan, chosen from the batch's average packed query length, so a graph captured for one kind of batch
launches the wrong grid for another.  The kernel reads every work item's request, query rows and KV
range from the schedule and the page ids from the fixed ``kv_indices`` buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import _kernels as K

__all__ = ["BatchMLAPagedAttentionWrapper", "MLAPlanMetadata", "NUM_SM"]

#: the stand-in "GPU"'s SMs: at most this many clusters of one CTA
NUM_SM = 8
_INT_WORKSPACE = 1 << 16
#: ints per work item: request, query rows [start, end) and KV range [start, end) within the request, its query
#: offset and page offset, its query and KV lengths
_FIELDS = 9


@dataclass
class MLAPlanMetadata:
    """Canonical CSR metadata (``MLAPlanMetadata.csr``), as FlashInfer's."""

    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_len_arr: torch.Tensor

    @classmethod
    def csr(cls, qo_indptr, kv_indptr, kv_indices, kv_len_arr) -> MLAPlanMetadata:
        return cls(qo_indptr, kv_indptr, kv_indices, kv_len_arr)


class _MLAModule:
    """The MLA kernel module: ``plan`` and ``run`` in FlashInfer's argument order."""

    def plan(
        self, float_ws, int_ws, pinned, qo_indptr_host, kv_indptr_host, kv_len_host, num_heads, head_dim_ckv, causal
    ):
        qo, kvp, kvl = qo_indptr_host.tolist(), kv_indptr_host.tolist(), kv_len_host.tolist()
        batch = len(kvl)
        packed = [(qo[r + 1] - qo[r]) * num_heads for r in range(batch)]
        cluster = 2 if sum(packed) // max(batch, 1) > 64 else 1
        clusters = NUM_SM // cluster
        rows_per_tile = max(1, cluster * 64 // num_heads)
        limit = max(1, -(-sum(kvl) // clusters))
        items = []
        for r in range(batch):
            q_len = qo[r + 1] - qo[r]
            for q0 in range(0, q_len, rows_per_tile):
                for k0 in range(0, max(kvl[r], 1), limit):
                    items.append(
                        [
                            r,
                            q0,
                            min(q0 + rows_per_tile, q_len),
                            k0,
                            min(k0 + limit, kvl[r]),
                            qo[r],
                            kvp[r],
                            q_len,
                            kvl[r],
                        ]
                    )
        per: list[list[Any]] = [[] for _ in range(clusters)]
        for i, item in enumerate(items):  # round robin: the stand-in's load balancing
            per[i % clusters].append(item)
        work_indptr = [0]
        for p in per:
            work_indptr.append(work_indptr[-1] + len(p))
        flat = [v for p in per for item in p for v in item]
        # a fixed capacity for the grid's entries, as FlashInfer's: entries past this plan's clusters keep
        # what an earlier plan wrote there
        off = K.write_ints(int_ws, pinned, [work_indptr + [work_indptr[-1]] * (NUM_SM - clusters), flat])
        return [cluster, clusters, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, off[0], off[1], 0]

    def run(
        self,
        float_ws,
        int_ws,
        plan_info,
        q_nope,
        q_pe,
        ckv_cache,
        kpe_cache,
        kv_indices,
        out,
        lse,
        mask_mode,
        num_heads,
        page_size,
        sm_scale,
        *rest: Any,
    ):
        clusters, work_off, items_off = plan_info[1], plan_info[15], plan_info[16]
        work_indptr = K.read_ints(int_ws, work_off, clusters + 1)
        idx = kv_indices.tolist()
        q_nope, q_pe, out = K.rows_of(q_nope), K.rows_of(q_pe), K.rows_of(out)
        ckv, kpe = ckv_cache.reshape(-1, ckv_cache.shape[-1]), kpe_cache.reshape(-1, kpe_cache.shape[-1])
        parts: dict[tuple[int, int], list] = {}
        for y in range(clusters):
            for w in range(work_indptr[y], work_indptr[y + 1]):
                _, q0, q1, k0, k1, qo_off, page_off, q_len, kv_len = K.read_ints(
                    int_ws, items_off + 4 * _FIELDS * w, _FIELDS
                )
                n_pages = -(-k1 // page_size) if k1 > 0 else 0
                rows = K.page_positions(idx[page_off : page_off + n_pages], page_size, k0, max(k0, k1))
                q = torch.cat([q_nope[qo_off + q0 : qo_off + q1], q_pe[qo_off + q0 : qo_off + q1]], dim=-1)
                k = torch.cat([ckv[rows], kpe[rows]], dim=-1)[:, None, :]
                v = ckv[rows][:, None, :]
                # causal: the query rows are the request's last ones and see keys up to their own position
                q_pos = torch.arange(q0, q1) + (kv_len - q_len) if mask_mode == 1 else None
                parts.setdefault((qo_off + q0, qo_off + q1), []).append(
                    K.attend(q, k, v, sm_scale, q_pos, torch.arange(k0, max(k0, k1)))
                )
        for (a, b), ps in parts.items():
            out[a:b] = K.merge(ps).to(out.dtype)


class _PlannedFa:
    """The planned backend object a FlashInfer MLA wrapper runs through (``_planned_backend``)."""

    # set by the wrapper's plan()
    _causal: bool
    _sm_scale: float
    _page_size: int

    def __init__(self, wrapper: BatchMLAPagedAttentionWrapper):
        self._float_workspace_buffer = wrapper._float_workspace_buffer
        self._int_workspace_buffer = torch.zeros(_INT_WORKSPACE, dtype=torch.uint8)
        self._pin_memory_int_workspace_buffer = torch.zeros(_INT_WORKSPACE, dtype=torch.uint8)
        self._use_cuda_graph = wrapper._use_cuda_graph
        self._qo_indptr_buf, self._kv_indptr_buf = wrapper._qo_indptr_buf, wrapper._kv_indptr_buf
        self._kv_indices_buf, self._kv_len_arr_buf = wrapper._kv_indices_buf, wrapper._kv_len_arr_buf
        self._cached_module = _MLAModule()
        self._plan_info = None


class BatchMLAPagedAttentionWrapper:
    """Stand-in of ``flashinfer.mla.BatchMLAPagedAttentionWrapper``: CSR metadata, split query and KV cache."""

    def __init__(
        self,
        float_workspace_buffer,
        use_cuda_graph=False,
        qo_indptr=None,
        kv_indptr=None,
        kv_indices=None,
        kv_len_arr=None,
        backend="auto",
    ):
        if float_workspace_buffer.device.type != "cpu":
            raise RuntimeError("graphsafe's FlashInfer stand-in runs on the CPU only; use FlashInfer itself on a GPU")
        self._float_workspace_buffer = float_workspace_buffer
        self._use_cuda_graph = use_cuda_graph
        self._qo_indptr_buf, self._kv_indptr_buf, self._kv_indices_buf, self._kv_len_arr_buf = (
            qo_indptr,
            kv_indptr,
            kv_indices,
            kv_len_arr,
        )
        self._planned_backend: _PlannedFa | None = None
        self.calls: list[tuple] = []

    def plan(
        self,
        *,
        metadata: MLAPlanMetadata,
        num_heads,
        head_dim_ckv,
        head_dim_kpe,
        page_size,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
        query_layout="packed",
        kv_cache_layout="packed",
        **unsupported,
    ):
        if unsupported:
            raise NotImplementedError(f"the stand-in's MLA plan() does not take {sorted(unsupported)}")
        b = self._planned_backend = self._planned_backend or _PlannedFa(self)
        m = metadata
        if self._use_cuda_graph:
            for target, source in (
                (b._qo_indptr_buf, m.qo_indptr),
                (b._kv_indptr_buf, m.kv_indptr),
                (b._kv_indices_buf[: len(m.kv_indices)], m.kv_indices),
                (b._kv_len_arr_buf, m.kv_len_arr),
            ):
                if target.shape != source.shape:
                    raise ValueError("CUDA graph reserved buffer has insufficient or incompatible capacity.")
                target.copy_(source)
        else:
            b._qo_indptr_buf, b._kv_indptr_buf = m.qo_indptr.clone(), m.kv_indptr.clone()
            b._kv_indices_buf, b._kv_len_arr_buf = m.kv_indices.clone(), m.kv_len_arr.clone()
        b._plan_info = b._cached_module.plan(
            b._float_workspace_buffer,
            b._int_workspace_buffer,
            b._pin_memory_int_workspace_buffer,
            m.qo_indptr.cpu(),
            m.kv_indptr.cpu(),
            m.kv_len_arr.cpu(),
            num_heads,
            head_dim_ckv,
            causal,
        )
        b._causal, b._sm_scale, b._page_size = causal, sm_scale, page_size
        self.calls.append(("plan", len(m.kv_len_arr), int(m.qo_indptr[-1])))

    def run(self, *, query, kv_cache, out=None, lse=None, return_lse=False, **unsupported):
        if unsupported:
            raise NotImplementedError(f"the stand-in's MLA run() does not take {sorted(unsupported)}")
        b = self._planned_backend
        if b is None:
            raise RuntimeError("BatchMLAPagedAttentionWrapper.run() called before plan().")
        (q_nope, q_pe), (ckv, kpe) = query, kv_cache
        out = torch.empty_like(q_nope) if out is None else out
        self.calls.append(("run", q_nope.shape[0]))
        b._cached_module.run(
            b._float_workspace_buffer,
            b._int_workspace_buffer,
            b._plan_info,
            q_nope,
            q_pe,
            ckv,
            kpe,
            b._kv_indices_buf,
            out,
            lse,
            1 if b._causal else 0,
            q_nope.shape[1],
            b._page_size,
            b._sm_scale,
        )
        return out

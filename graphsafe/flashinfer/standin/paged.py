"""Stand-ins of FlashInfer's paged decode and prefill wrappers and of their kernel modules.

The wrappers keep FlashInfer's buffer semantics: in CUDA-graph mode the index buffers are fixed at
construction and ``plan()`` copies into them; in the default mode ``plan()`` rebinds them to new
tensors.  ``plan()`` writes a schedule into the int workspace and keeps the plan's host values
(``_plan_info``, FlashInfer's field order) that ``run()`` passes to the kernel module: in CUDA-graph
mode the grid is fixed (``padded_batch_size``), the split decision follows FlashInfer's planners (always
split in CUDA-graph mode, unless ``fixed_split_size`` or ``disable_split_kv`` decide).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from . import _kernels as K

__all__ = ["BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper", "MAX_GRID"]

#: CTAs the stand-in "GPU" runs at once (FlashInfer: SMs x blocks per SM)
MAX_GRID = 32
_INT_WORKSPACE = 1 << 16


def _pages_of(indptr: list[int], indices: list[int], r: int) -> list[int]:
    return indices[indptr[r]:indptr[r + 1]]


def _binary_chunk(budget: int, lengths: list[int], rows: list[int]) -> int:
    """The smallest KV chunk (tokens) that keeps the work items within ``budget`` (FlashInfer's search)."""
    lo, hi = 1, max([1] + lengths)
    while lo < hi:
        mid = (lo + hi) // 2
        if sum(r * K.chunk_count(n, mid) for n, r in zip(lengths, rows)) > budget:
            lo = mid + 1
        else:
            hi = mid
    return lo


class _DecodeModule:
    """The non-tensor-core decode kernel module: ``plan`` and ``run`` (FlashInfer's argument order)."""

    def plan(self, float_ws, int_ws, pinned, indptr_host, batch_size, num_qo_heads, num_kv_heads, page_size,
             enable_cuda_graph, window_left, logits_soft_cap, head_dim_qk, head_dim_vo, empty_q, empty_kv,
             last_page_len_host=None):
        indptr = indptr_host.tolist()
        pages = [indptr[r + 1] - indptr[r] for r in range(batch_size)]
        gdy = num_kv_heads
        if batch_size * gdy >= MAX_GRID:
            split, chunk_pages, new = False, max([1] + pages), batch_size
        else:
            chunk_pages = _binary_chunk(MAX_GRID // gdy, pages, [1] * batch_size)
            new = sum(K.chunk_count(p, chunk_pages) for p in pages)
            split = enable_cuda_graph or new != batch_size
        padded = (MAX_GRID // gdy if split else batch_size) if enable_cuda_graph else new
        work = [(r, c) for r in range(batch_size) for c in range(K.chunk_count(pages[r], chunk_pages))]
        req = [r for r, _ in work] + [0] * (padded - len(work))
        tile = [c for _, c in work] + [0] * (padded - len(work))
        valid = [1] * len(work) + [0] * (padded - len(work))
        o_indptr = [0]
        for p in pages:
            o_indptr.append(o_indptr[-1] + K.chunk_count(p, chunk_pages))
        off = K.write_ints(int_ws, pinned, [req, tile, o_indptr, [chunk_pages * page_size], valid])
        return [padded, 0, 0, off[0], off[1], off[2], off[4], off[3], int(enable_cuda_graph), int(split)]

    def run(self, float_ws, int_ws, plan_info, q, k_cache, v_cache, indptr, indices, last_page_len, out, lse,
            layout, window_left, enable_pdl, alibi_slopes, logits_soft_cap, sm_scale, rope_scale, rope_theta):
        padded, _, _, req_off, tile_off, _, valid_off, chunk_off, _, split = plan_info
        req, tile = K.read_ints(int_ws, req_off, padded), K.read_ints(int_ws, tile_off, padded)
        valid, [chunk] = K.read_ints(int_ws, valid_off, padded), K.read_ints(int_ws, chunk_off, 1)
        ip, idx, last = indptr.tolist(), indices.tolist(), last_page_len.tolist()
        bs, q, out = k_cache.shape[1], K.rows_of(q), K.rows_of(out)
        kf, vf = k_cache.reshape(-1, *k_cache.shape[2:]), v_cache.reshape(-1, *v_cache.shape[2:])
        parts: dict[int, list] = {}
        for w in range(padded):
            if not valid[w]:
                continue
            r, c = req[w], tile[w]
            pages = _pages_of(ip, idx, r)
            n = K.kv_len(len(pages), last[r], bs)
            lo, hi = c * chunk, min((c + 1) * chunk, n)
            rows = K.page_positions(pages, bs, lo, max(lo, hi))
            part = K.attend(q[r:r + 1], kf[rows], vf[rows], sm_scale, None, rows)
            if split:
                parts.setdefault(r, []).append(part)
            else:  # the unsplit kernel writes each work item's result straight to the output
                out[r:r + 1] = K.merge([part]).to(out.dtype)
        for r, ps in parts.items():
            out[r:r + 1] = K.merge(ps).to(out.dtype)


class _PagedModule:
    """The prefill kernel module (also tensor-core decode's): ``plan`` and ``paged_run``."""

    def plan(self, float_ws, int_ws, pinned, qo_indptr_host, kv_indptr_host, kv_len_host, total_num_rows,
             batch_size, num_qo_heads, num_kv_heads, page_size, enable_cuda_graph, head_dim_qk, head_dim_vo,
             causal, window_left, fixed_split_size=-1, disable_split_kv=False, num_colocated_ctas=0,
             uniform_q_len=0):
        qo, kvl = qo_indptr_host.tolist(), kv_len_host.tolist()
        gqa = num_qo_heads // num_kv_heads
        packed = [(qo[r + 1] - qo[r]) * gqa for r in range(batch_size)]
        longest = (total_num_rows - batch_size + 1) * gqa if enable_cuda_graph else max(1, sum(packed) // batch_size)
        tile = 16 if longest <= 16 else 64
        tiles_q = [math.ceil(p / tile) for p in packed]
        budget = MAX_GRID // num_kv_heads
        if disable_split_kv:
            chunk, split = 1 << 30, False
        elif fixed_split_size and fixed_split_size > 0:
            chunk, split = fixed_split_size * page_size, False
        else:
            chunk = _binary_chunk(budget, kvl, [max(t, 1) for t in tiles_q])
            split = enable_cuda_graph or chunk < max([1] + kvl)
        work = []
        for r in range(batch_size):
            chunks = 1 if disable_split_kv else K.chunk_count(kvl[r], chunk)
            if fixed_split_size and fixed_split_size > 0 and not disable_split_kv:
                split = split or chunks > 1
            work += [(r, t, c) for t in range(tiles_q[r]) for c in range(chunks)]
        total_tiles = math.ceil(total_num_rows * gqa / tile) + batch_size - 1 if enable_cuda_graph else len(work)
        padded = max(budget, total_tiles) if enable_cuda_graph else len(work)
        if len(work) > padded:
            raise RuntimeError("new batch size should not exceed padded batch size (stand-in of FlashInfer's check)")
        pad = padded - len(work)
        parts = [[w[0] for w in work] + [0] * pad, [w[1] for w in work] + [0] * pad, [w[2] for w in work] + [0] * pad,
                 [1] * len(work) + [0] * pad, [min(chunk, 1 << 30)], [qo[batch_size]]]
        off = K.write_ints(int_ws, pinned, parts)
        return [padded, total_num_rows, off[5], tile, off[0], off[1], off[2], 0, 0, off[4], 0, 0, off[3],
                int(enable_cuda_graph), int(split)]

    def paged_run(self, float_ws, int_ws, plan_info, q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices,
                  last_page_len, out, lse, mask_mode, layout, window_left, enable_pdl, *rest: Any):
        padded, _, _, tile, req_off, qt_off, kt_off, _, _, chunk_off, _, _, valid_off, _, split = plan_info
        req, qts = K.read_ints(int_ws, req_off, padded), K.read_ints(int_ws, qt_off, padded)
        kts, valid = K.read_ints(int_ws, kt_off, padded), K.read_ints(int_ws, valid_off, padded)
        [chunk] = K.read_ints(int_ws, chunk_off, 1)
        qo, ip, idx, last = qo_indptr.tolist(), kv_indptr.tolist(), kv_indices.tolist(), last_page_len.tolist()
        bs, gqa = k_cache.shape[1], q.shape[1] // k_cache.shape[2]
        q, out = K.rows_of(q), K.rows_of(out)
        scale = rest[7] if len(rest) > 7 else 1.0 / math.sqrt(q.shape[-1])  # the sm_scale argument
        kf, vf = k_cache.reshape(-1, *k_cache.shape[2:]), v_cache.reshape(-1, *v_cache.shape[2:])
        rows_per_tile = max(1, tile // gqa)
        parts: dict[tuple[int, int], list] = {}
        for w in range(padded):
            if not valid[w]:
                continue
            r, t, c = req[w], qts[w], kts[w]
            q_len = qo[r + 1] - qo[r]
            pages = _pages_of(ip, idx, r)
            n = K.kv_len(len(pages), last[r], bs)
            q_lo, q_hi = t * rows_per_tile, min((t + 1) * rows_per_tile, q_len)
            if q_hi <= q_lo:
                continue
            lo, hi = c * chunk, min((c + 1) * chunk, n)
            kv_rows = K.page_positions(pages, bs, lo, max(lo, hi))
            q_pos = torch.arange(q_lo, q_hi) + (n - q_len) if mask_mode == 1 else None
            part = K.attend(q[qo[r] + q_lo: qo[r] + q_hi], kf[kv_rows], vf[kv_rows], scale, q_pos, torch.arange(lo, max(lo, hi)))
            if split:
                parts.setdefault((qo[r] + q_lo, qo[r] + q_hi), []).append(part)
            else:
                out[qo[r] + q_lo: qo[r] + q_hi] = K.merge([part]).to(out.dtype)
        for (a, b), ps in parts.items():
            out[a:b] = K.merge(ps).to(out.dtype)


class _Wrapper:
    """What the decode and prefill stand-ins share: workspaces, CUDA-graph or default mode, the call log."""

    def __init__(self, float_workspace_buffer: torch.Tensor, kv_layout: str, use_cuda_graph: bool,
                 buffers: dict[str, torch.Tensor | None], batch_key: str):
        if float_workspace_buffer.device.type != "cpu":
            raise RuntimeError("graphsafe's FlashInfer stand-in runs on the CPU only (its kernels read the schedule "
                               "on the host); use FlashInfer itself on a GPU")
        if kv_layout != "NHD":
            raise NotImplementedError("the stand-in supports kv_layout='NHD' only")
        self._float_workspace_buffer = float_workspace_buffer
        self.device = float_workspace_buffer.device
        self._int_workspace_buffer = torch.zeros(_INT_WORKSPACE, dtype=torch.uint8)
        self._pin_memory_int_workspace_buffer = torch.zeros(_INT_WORKSPACE, dtype=torch.uint8)
        self._use_cuda_graph = use_cuda_graph
        self.calls: list[tuple] = []  # ("plan", batch size, total rows) and ("run", rows) in call order
        if use_cuda_graph:
            missing = [k for k, v in buffers.items() if not torch.is_tensor(v)]
            if missing:
                raise ValueError(f"{missing[0]} should be a torch.Tensor in cudagraph mode")
            self._fixed_batch_size = len(buffers[batch_key])
        else:
            self._fixed_batch_size = 0
        for k, v in buffers.items():
            setattr(self, "_" + k.removesuffix("_buffer").removesuffix("_buf") + "_buf", v)
        self._plan_info = None
        self._cached_module: Any = None

    @property
    def is_cuda_graph_enabled(self) -> bool:
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer: torch.Tensor, int_workspace_buffer: torch.Tensor) -> None:
        self._float_workspace_buffer = float_workspace_buffer
        self._int_workspace_buffer = int_workspace_buffer
        self._pin_memory_int_workspace_buffer = torch.zeros(int_workspace_buffer.shape, dtype=torch.uint8)

    def _stage(self, name: str, source: torch.Tensor, prefix: bool = False) -> None:
        """CUDA-graph mode copies into the fixed buffer; the default mode rebinds it (FlashInfer's plan())."""
        attr = f"_{name}_buf"
        if self._use_cuda_graph:
            target = getattr(self, attr)
            (target[:len(source)] if prefix else target).copy_(source)
        else:
            setattr(self, attr, source.to(self.device))

    def _check_batch(self, batch_size: int) -> None:
        if self._use_cuda_graph and batch_size != self._fixed_batch_size:
            raise ValueError(f"The batch size should be fixed in cudagraph mode, the runtime batch size {batch_size} "
                             f"mismatches the batch size set during initialization {self._fixed_batch_size}")


class BatchDecodeWithPagedKVCacheWrapper(_Wrapper):
    """Stand-in of ``flashinfer.BatchDecodeWithPagedKVCacheWrapper`` (NHD, no RoPE, one query per request)."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None):
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph,
                         {"paged_kv_indptr_buffer": paged_kv_indptr_buffer,
                          "paged_kv_indices_buffer": paged_kv_indices_buffer,
                          "paged_kv_last_page_len_buffer": paged_kv_last_page_len_buffer},
                         "paged_kv_last_page_len_buffer")
        self._use_tensor_cores = use_tensor_cores
        if use_tensor_cores:
            self._qo_indptr_buf = torch.arange(self._fixed_batch_size + 1, dtype=torch.int32)

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, *,
             q_data_type="float16", kv_data_type=None, o_data_type=None, sm_scale=None, window_left=-1,
             fixed_split_size=None, disable_split_kv=False, non_blocking=True, **unsupported):
        if unsupported:
            raise NotImplementedError(f"the stand-in's decode plan() does not take {sorted(unsupported)}")
        batch_size = len(last_page_len)
        self._check_batch(batch_size)
        if fixed_split_size is not None and not self._use_tensor_cores:
            raise ValueError("fixed_split_size is only supported by tensor core decode for now.")
        self._stage("paged_kv_indptr", indptr)
        self._stage("paged_kv_last_page_len", last_page_len)
        self._stage("paged_kv_indices", indices, prefix=True)
        self._sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim)
        self._window_left = window_left
        ih, lh = indptr.cpu(), last_page_len.cpu()
        self.calls.append(("plan", batch_size, batch_size))
        if self._use_tensor_cores:
            if not self._use_cuda_graph:
                self._qo_indptr_buf = torch.arange(batch_size + 1, dtype=torch.int32)
            lens = torch.tensor([K.kv_len(int(ih[r + 1] - ih[r]), int(lh[r]), page_size) for r in range(batch_size)])
            self._cached_module = _PagedModule()
            self._plan_info = self._cached_module.plan(
                self._float_workspace_buffer, self._int_workspace_buffer, self._pin_memory_int_workspace_buffer,
                torch.arange(batch_size + 1), ih, lens, batch_size, batch_size, num_qo_heads, num_kv_heads,
                page_size, self._use_cuda_graph, head_dim, head_dim, False, window_left,
                fixed_split_size or -1, disable_split_kv, 0, 0)
        else:
            self._cached_module = _DecodeModule()
            self._plan_info = self._cached_module.plan(
                self._float_workspace_buffer, self._int_workspace_buffer, self._pin_memory_int_workspace_buffer,
                ih, batch_size, num_qo_heads, num_kv_heads, page_size, self._use_cuda_graph, window_left, 0.0,
                head_dim, head_dim, None, None)

    def run(self, q, paged_kv_cache, *, out=None, lse=None, return_lse=False, enable_pdl=None, **unsupported):
        if unsupported:
            raise NotImplementedError(f"the stand-in's decode run() does not take {sorted(unsupported)}")
        k_cache, v_cache = paged_kv_cache
        out = torch.empty_like(q) if out is None else out
        self.calls.append(("run", q.shape[0]))
        if self._use_tensor_cores:
            self._cached_module.paged_run(
                self._float_workspace_buffer, self._int_workspace_buffer, self._plan_info, q, k_cache, v_cache,
                self._qo_indptr_buf, self._paged_kv_indptr_buf, self._paged_kv_indices_buf,
                self._paged_kv_last_page_len_buf, out, lse, 0, 0, self._window_left, False,
                None, None, None, None, None, None, 0.0, self._sm_scale)
        else:
            self._cached_module.run(
                self._float_workspace_buffer, self._int_workspace_buffer, self._plan_info, q, k_cache, v_cache,
                self._paged_kv_indptr_buf, self._paged_kv_indices_buf, self._paged_kv_last_page_len_buf, out, lse,
                0, self._window_left, False, None, 0.0, self._sm_scale, 1.0, 1e4)
        return out


class BatchPrefillWithPagedKVCacheWrapper(_Wrapper):
    """Stand-in of ``flashinfer.BatchPrefillWithPagedKVCacheWrapper`` (NHD, causal or not, no custom mask)."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None,
                 custom_mask_buf=None, mask_indptr_buf=None, backend="auto", jit_args=None):
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph,
                         {"qo_indptr_buf": qo_indptr_buf, "paged_kv_indptr_buf": paged_kv_indptr_buf,
                          "paged_kv_indices_buf": paged_kv_indices_buf,
                          "paged_kv_last_page_len_buf": paged_kv_last_page_len_buf},
                         "paged_kv_last_page_len_buf")
        self._max_total_num_rows = None

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
             num_kv_heads, head_dim_qk, page_size, *, causal=False, q_data_type="float16", kv_data_type=None,
             o_data_type=None, sm_scale=None, window_left=-1, fixed_split_size=None, disable_split_kv=False,
             non_blocking=True, **unsupported):
        if unsupported:
            raise NotImplementedError(f"the stand-in's prefill plan() does not take {sorted(unsupported)}")
        batch_size = len(paged_kv_last_page_len)
        self._check_batch(batch_size)
        qh, ih, lh = qo_indptr.cpu(), paged_kv_indptr.cpu(), paged_kv_last_page_len.cpu()
        total = int(qh[-1])
        if self._use_cuda_graph:
            if self._max_total_num_rows is None:
                self._max_total_num_rows = total
            elif total > self._max_total_num_rows:
                raise ValueError(f"The total number of rows in qo_indptr {total} in cuda graph mode cannot exceed "
                                 f"the number of rows set during initialization {self._max_total_num_rows}.")
        self._stage("qo_indptr", qo_indptr)
        self._stage("paged_kv_indptr", paged_kv_indptr)
        self._stage("paged_kv_last_page_len", paged_kv_last_page_len)
        self._stage("paged_kv_indices", paged_kv_indices, prefix=True)
        self._qo_indptr_last, self._causal = total, causal
        self._sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim_qk)
        self._window_left = window_left
        lens = torch.tensor([K.kv_len(int(ih[r + 1] - ih[r]), int(lh[r]), page_size) for r in range(batch_size)])
        self.calls.append(("plan", batch_size, total))
        self._cached_module = _PagedModule()
        self._plan_info = self._cached_module.plan(
            self._float_workspace_buffer, self._int_workspace_buffer, self._pin_memory_int_workspace_buffer,
            qh, ih, lens, self._max_total_num_rows or total, batch_size, num_qo_heads, num_kv_heads, page_size,
            self._use_cuda_graph, head_dim_qk, head_dim_qk, causal, window_left, fixed_split_size or -1,
            disable_split_kv, 0, 0)

    def run(self, q, paged_kv_cache, *, out=None, lse=None, return_lse=False, enable_pdl=None, **unsupported):
        if unsupported:
            raise NotImplementedError(f"the stand-in's prefill run() does not take {sorted(unsupported)}")
        if q.shape[0] != self._qo_indptr_last:
            raise ValueError(f"q.shape[0] ({q.shape[0]}) does not match qo_indptr[-1] ({self._qo_indptr_last}). For "
                             "paged prefill, q must have shape [total_tokens, num_heads, head_dim]")
        k_cache, v_cache = paged_kv_cache
        out = torch.empty_like(q) if out is None else out
        self.calls.append(("run", q.shape[0]))
        self._cached_module.paged_run(
            self._float_workspace_buffer, self._int_workspace_buffer, self._plan_info, q, k_cache, v_cache,
            self._qo_indptr_buf, self._paged_kv_indptr_buf, self._paged_kv_indices_buf,
            self._paged_kv_last_page_len_buf, out, lse, 1 if self._causal else 0, 0, self._window_left, False,
            None, None, None, None, None, None, 0.0, self._sm_scale)
        return out

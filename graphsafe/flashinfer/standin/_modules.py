"""The stand-in's kernel modules for paged decode and prefill: ``plan`` and ``run`` in FlashInfer's argument order.

``plan()`` writes a schedule into the int workspace and returns the plan's host values (``_plan_info``,
FlashInfer's field order); ``run()`` reads the schedule back on the host and attends.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from . import _kernels as K

__all__ = ["MAX_GRID", "DecodeModule", "PagedModule"]

#: CTAs the stand-in "GPU" runs at once (FlashInfer: SMs x blocks per SM)
MAX_GRID = 32
_INT_WORKSPACE = 1 << 16


def _pages_of(indptr: list[int], indices: list[int], r: int) -> list[int]:
    return indices[indptr[r] : indptr[r + 1]]


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


class DecodeModule:
    """The non-tensor-core decode kernel module: ``plan`` and ``run`` (FlashInfer's argument order)."""

    def plan(
        self,
        float_ws,
        int_ws,
        pinned,
        indptr_host,
        batch_size,
        num_qo_heads,
        num_kv_heads,
        page_size,
        enable_cuda_graph,
        window_left,
        logits_soft_cap,
        head_dim_qk,
        head_dim_vo,
        empty_q,
        empty_kv,
        last_page_len_host=None,
    ):
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

    def run(
        self,
        float_ws,
        int_ws,
        plan_info,
        q,
        k_cache,
        v_cache,
        indptr,
        indices,
        last_page_len,
        out,
        lse,
        layout,
        window_left,
        enable_pdl,
        alibi_slopes,
        logits_soft_cap,
        sm_scale,
        rope_scale,
        rope_theta,
    ):
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
            part = K.attend(q[r : r + 1], kf[rows], vf[rows], sm_scale, None, rows)
            if split:
                parts.setdefault(r, []).append(part)
            else:  # the unsplit kernel writes each work item's result straight to the output
                out[r : r + 1] = K.merge([part]).to(out.dtype)
        for r, ps in parts.items():
            out[r : r + 1] = K.merge(ps).to(out.dtype)


class PagedModule:
    """The prefill kernel module (also tensor-core decode's): ``plan`` and ``paged_run``."""

    def plan(
        self,
        float_ws,
        int_ws,
        pinned,
        qo_indptr_host,
        kv_indptr_host,
        kv_len_host,
        total_num_rows,
        batch_size,
        num_qo_heads,
        num_kv_heads,
        page_size,
        enable_cuda_graph,
        head_dim_qk,
        head_dim_vo,
        causal,
        window_left,
        fixed_split_size=-1,
        disable_split_kv=False,
        num_colocated_ctas=0,
        uniform_q_len=0,
    ):
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
        parts = [
            [w[0] for w in work] + [0] * pad,
            [w[1] for w in work] + [0] * pad,
            [w[2] for w in work] + [0] * pad,
            [1] * len(work) + [0] * pad,
            [min(chunk, 1 << 30)],
            [qo[batch_size]],
        ]
        off = K.write_ints(int_ws, pinned, parts)
        return [
            padded,
            total_num_rows,
            off[5],
            tile,
            off[0],
            off[1],
            off[2],
            0,
            0,
            off[4],
            0,
            0,
            off[3],
            int(enable_cuda_graph),
            int(split),
        ]

    def paged_run(
        self,
        float_ws,
        int_ws,
        plan_info,
        q,
        k_cache,
        v_cache,
        qo_indptr,
        kv_indptr,
        kv_indices,
        last_page_len,
        out,
        lse,
        mask_mode,
        layout,
        window_left,
        enable_pdl,
        *rest: Any,
    ):
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
            part = K.attend(
                q[qo[r] + q_lo : qo[r] + q_hi], kf[kv_rows], vf[kv_rows], scale, q_pos, torch.arange(lo, max(lo, hi))
            )
            if split:
                parts.setdefault((qo[r] + q_lo, qo[r] + q_hi), []).append(part)
            else:
                out[qo[r] + q_lo : qo[r] + q_hi] = K.merge([part]).to(out.dtype)
        for (a, b), ps in parts.items():
            out[a:b] = K.merge(ps).to(out.dtype)

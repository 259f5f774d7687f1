"""The stand-in's "kernels": paged attention over a schedule read from the int workspace, in torch.

They take what FlashInfer's kernel modules take (workspaces, the plan's host values, the index
buffers, the caches) and read the schedule the stand-in's planners wrote into the int workspace, so
that a stale schedule, a frozen plan value or a freed buffer breaks them as it breaks FlashInfer.
CPU only: they read device values on the host.
"""

from __future__ import annotations

import math
from typing import cast

import torch

__all__ = ["ints", "write_ints", "read_ints", "attend", "merge", "page_positions", "rows_of"]

NEG = float("-inf")


def ints(n: int) -> int:
    """Bytes for ``n`` int32 values, 16-aligned (FlashInfer's aligned allocator)."""
    return -(-4 * n // 16) * 16


def write_ints(int_ws: torch.Tensor, pinned: torch.Tensor, parts: list[list[int]]) -> list[int]:
    """Lay out ``parts`` as int32 arrays one after another (16-byte aligned) in the pinned staging buffer,
    copy it into the int workspace as FlashInfer's planners do, and return each part's byte offset."""
    offsets, at = [], 0
    for part in parts:
        offsets.append(at)
        at += ints(max(len(part), 1))
    if at > int_ws.numel():
        raise RuntimeError(f"stand-in plan needs {at} bytes of int workspace, the buffer has {int_ws.numel()}")
    staged = pinned[:at].view(torch.int32)
    for off, part in zip(offsets, parts):
        if part:
            staged[off // 4 : off // 4 + len(part)] = torch.tensor(part, dtype=torch.int32)
    int_ws[:at].copy_(pinned[:at])
    return offsets


def read_ints(int_ws: torch.Tensor, offset: int, n: int) -> list[int]:
    return int_ws[offset : offset + 4 * n].view(torch.int32).tolist()


def rows_of(t: torch.Tensor) -> torch.Tensor:
    """``t`` (rows along dim 0) seen as a kernel sees it, a pointer: every row its storage holds from its
    first one on, whatever the view's length (a query or output frozen shorter than the schedule)."""
    row = t.stride(0)
    rows = (t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()) // row
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        t.untyped_storage(), t.storage_offset(), (rows, *t.shape[1:]), t.stride()
    )


def page_positions(pages: list[int], page_size: int, lo: int, hi: int) -> torch.Tensor:
    """Flat cache rows (page * page_size + offset) of token positions ``lo..hi-1`` of a request."""
    pos = torch.arange(lo, hi)
    table = torch.tensor(pages, dtype=torch.int64) if pages else torch.zeros(0, dtype=torch.int64)
    return table[pos // page_size] * page_size + pos % page_size


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, q_pos: torch.Tensor | None, k_pos: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Partial attention of queries ``q`` [n, Hq, D] over keys ``k`` [m, Hkv, D] (GQA): the running
    max, sum and unnormalised output (m [n, Hq], l [n, Hq], acc [n, Hq, Dv]); causal when ``q_pos`` (each
    query's position) is given: a query sees the keys at or before its position."""
    hq, hkv = q.shape[1], k.shape[1]
    kk = k.float().repeat_interleave(hq // hkv, dim=1)
    vv = v.float().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("nhd,mhd->nhm", q.float(), kk) * scale
    if q_pos is not None:
        s = s.masked_fill(k_pos[None, None, :] > q_pos[:, None, None], NEG)
    m = s.amax(dim=-1) if s.shape[-1] else torch.full(s.shape[:2], NEG)
    p = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m)[..., None])
    return m, p.sum(-1), torch.einsum("nhm,mhd->nhd", p, vv)


def merge(parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Combine partials of one set of queries (as FlashInfer's merge_states): the normalised output."""
    m = torch.stack([p[0] for p in parts]).amax(dim=0)
    m0 = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    # sums of at least one tensor: tensors
    l = cast(torch.Tensor, sum(p[1] * torch.exp(p[0] - m0) for p in parts))
    acc = cast(torch.Tensor, sum(p[2] * torch.exp(p[0] - m0)[..., None] for p in parts))
    return torch.where(l[..., None] > 0, acc / l.clamp_min(1e-30)[..., None], torch.zeros_like(acc))


def kv_len(pages: int, last_page_len: int, page_size: int) -> int:
    """A request's KV length from its page count and last page length (0 for no page)."""
    return 0 if pages <= 0 else (pages - 1) * page_size + last_page_len


def chunk_count(length: int, chunk: int) -> int:
    return max(1, math.ceil(max(length, 1) / max(chunk, 1)))

"""Shared pieces of the reference backends.

Host side (runs in ``prepare``): turning a :class:`~graphsafe.Batch` into
request- and token-level tensors, writing them into persistent buffers, and
the seeded inputs.  Device side: the split-KV attention of the latent
(MLA-style) backends, where one latent KV head of ``LATENT`` dims is shared by
all query heads and serves as both key and value: stage one
(:func:`latent_attention_partial_kernel`, one program per token row and split)
writes each split's partial softmax, stage two (:func:`combine_splits_kernel`)
merges them; :func:`latent_attention` launches both.

The kernels call no ``@triton.jit`` helpers on purpose: under the Triton
interpreter every device-function call re-patches ``triton.language``, which
costs about a millisecond.

Input convention (the tests rely on it): the queries of a step's live tokens
are ``seeded((num_tokens, heads, dim), seed=derive_seed(batch.seed, "q"))``,
packed by ``batch.cu_query_lens``; new keys written by a backend use the name
``"k_new"``.  Token row ``t`` of a step is one of ``num_slots *
spec.max_query_len`` rows; rows from ``batch.num_tokens`` on are padding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
import triton
import triton.language as tl

from ..contract import Batch, CaptureSpec, Target
from ..values import derive_seed, seeded

__all__ = [
    "ReferenceTarget",
    "LatentTarget",
    "request_tensors",
    "token_tensors",
    "write_prefix",
    "live_inputs",
    "latent_attention",
    "latent_attention_partial_kernel",
    "combine_splits_kernel",
    "next_pow2",
]


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (Triton block shapes must be powers of two)."""
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


# --------------------------------------------------------------------------------------
# host side: batch -> tensors
# --------------------------------------------------------------------------------------
def request_tensors(batch: Batch, spec: CaptureSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The live requests' ``seq_lens`` [num_reqs], ``query_start_loc`` [num_reqs + 1] and
    ``block_table`` [num_reqs, blocks_per_seq] as int32 CPU tensors (unused table entries 0,
    the reserved null block)."""
    seq_lens = torch.tensor(batch.seq_lens, dtype=torch.int32)
    query_start_loc = torch.tensor(batch.cu_query_lens, dtype=torch.int32)
    table = torch.zeros(batch.num_reqs, spec.blocks_per_seq, dtype=torch.int32)
    for r, row in enumerate(batch.block_table):
        if row:
            table[r, : len(row)] = torch.tensor(row, dtype=torch.int32)
    return seq_lens, query_start_loc, table


def token_tensors(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per live token row (``batch.num_tokens`` rows, packed by ``cu_query_lens``):
    owning request, absolute position in its sequence, and how many keys it sees
    (``seq_len - query_len + j + 1``), as int32 CPU tensors."""
    req, pos = [], []
    for r, (q, s) in enumerate(zip(batch.query_lens, batch.seq_lens)):
        for j in range(q):
            req.append(r)
            pos.append(s - q + j)
    req_t = torch.tensor(req, dtype=torch.int32)
    pos_t = torch.tensor(pos, dtype=torch.int32)
    return req_t, pos_t, pos_t + 1


def write_prefix(buf: torch.Tensor, values: torch.Tensor, *, zero_tail: bool = True) -> None:
    """``buf[:n] = values`` (n = len(values)) and, unless ``zero_tail`` is False, ``buf[n:] = 0``.

    The tail reset is what makes padded slots harmless: without it they keep
    whatever an earlier, larger batch (or the capture batch) left there.
    """
    n = values.shape[0]
    buf[:n].copy_(values)
    if zero_tail:
        buf[n:].zero_()


def live_inputs(batch: Batch, name: str, tail: Sequence[int], device, dtype=torch.float32) -> torch.Tensor:
    """This step's seeded input ``name`` for the live tokens: shape ``(num_tokens, *tail)``."""
    return seeded((batch.num_tokens, *tail), seed=derive_seed(batch.seed, name), dtype=dtype, device=device)


class ReferenceTarget(Target):
    """Base of every reference target: registry name, expected finding, spec bookkeeping."""

    #: registered name, e.g. ``"triton_mla:nan_padding"``
    name: ClassVar[str] = ""
    #: the finding kind the checker must report (``None`` for a fixed variant)
    expected: ClassVar[str | None] = None

    def setup(self, spec: CaptureSpec, device) -> None:
        self.spec = spec
        self.device = torch.device(device)
        self.max_tokens = spec.max_reqs * spec.max_query_len
        self.num_slots = spec.max_reqs

    @property
    def num_token_rows(self) -> int:
        """Token rows forward() processes: ``num_slots * max_query_len`` (fixed per graph)."""
        return self.num_slots * self.spec.max_query_len


class LatentTarget(ReferenceTarget):
    """Base of the MLA-style targets: a paged latent cache ``[num_blocks, block_size, LATENT]``
    (key = value = the latent row) and a persistent query buffer ``[max_tokens, HEADS, LATENT]``."""

    #: 16 query heads: both products are ``tl.dot`` (which needs >= 16 rows on the GPU)
    HEADS: ClassVar[int] = 16
    LATENT: ClassVar[int] = 32
    cache_dtype: ClassVar[torch.dtype] = torch.float32

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.sm_scale = 1.0 / math.sqrt(self.LATENT)
        self.kv_cache = seeded(
            (spec.num_blocks, spec.block_size, self.LATENT),
            seed=derive_seed(0, type(self).__name__, "kv_cache"),
            dtype=self.cache_dtype,
            device=self.device,
        )
        self.q = torch.zeros(self.max_tokens, self.HEADS, self.LATENT, device=self.device)

    def write_queries(self, batch: Batch, *, zero_tail: bool = True) -> None:
        write_prefix(self.q, live_inputs(batch, "q", (self.HEADS, self.LATENT), self.device), zero_tail=zero_tail)

    def static(self):
        return {"kv_cache": self.kv_cache}


# --------------------------------------------------------------------------------------
# device side: Triton building blocks
# --------------------------------------------------------------------------------------
@triton.jit
def latent_attention_partial_kernel(
    q_ptr,  # [T, HEADS, LATENT] queries
    cache_ptr,  # [num_blocks, PAGE, LATENT] latent cache (fp32, or fp8 dequantised with kv_scale)
    bt_ptr,  # [T, bt_stride] block-table row of each token row (logical block -> physical block)
    out_ptr,  # DIRECT: [T, HEADS, LATENT] output; else [T, num_splits, HEADS, LATENT + 2] partials
    len_ptr,  # FROM_BOUNDS=False: [T] keys each token row sees (0: padding)
    split_len,  # FROM_BOUNDS=False: keys per split (split s covers [s * split_len, (s + 1) * split_len))
    bounds_ptr,  # FROM_BOUNDS=True: [T, bounds_stride] split s covers [bounds[s], bounds[s + 1])
    num_splits_ptr,  # FROM_BOUNDS=True: [T] splits in use; later splits are empty
    bt_stride,  # = blocks per row: rows hold at most bt_stride * PAGE keys
    bounds_stride,
    num_blocks,
    sm_scale,
    kv_scale,
    HEADS: tl.constexpr,
    LATENT: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FROM_BOUNDS: tl.constexpr,
    DIRECT: tl.constexpr,
    GUARD_EMPTY: tl.constexpr,
):
    """Stage one of split-KV decoding, program (token row t, split s): online softmax of
    t's queries over the split's key range.

    The key range comes either from the row's length and a split length
    (``FROM_BOUNDS=False``, TRITON_MLA style) or only from scheduler metadata
    (``FROM_BOUNDS=True``, FlashMLA style: stale metadata then gives wrong results).
    Writes the un-normalised ``(acc, max, sum)`` of the split (an empty range gives
    ``(0, -inf, 0)``; stage two decides what an empty row means), or with ``DIRECT``
    (a single split) the normalised output, where a row with no keys gives 0 with
    ``GUARD_EMPTY`` and ``0 / 0 = NaN`` without (as in stage two).
    """
    t = tl.program_id(0)
    s = tl.program_id(1)
    if FROM_BOUNDS:
        lo = tl.load(bounds_ptr + t * bounds_stride + s)
        hi = tl.load(bounds_ptr + t * bounds_stride + s + 1)
        hi = tl.where(s < tl.load(num_splits_ptr + t), hi, lo)
    else:
        n = tl.load(len_ptr + t)
        lo = tl.minimum(s * split_len, n)
        hi = tl.minimum(lo + split_len, n)
    lo = tl.minimum(tl.maximum(lo, 0), bt_stride * PAGE)
    hi = tl.minimum(tl.maximum(hi, lo), bt_stride * PAGE)
    offs_h = tl.arange(0, HEADS)
    offs_d = tl.arange(0, LATENT)
    hd = offs_h[:, None] * LATENT + offs_d[None, :]  # [HEADS, LATENT]
    q = tl.load(q_ptr + t * (HEADS * LATENT) + hd) * sm_scale
    m = tl.full([HEADS], float("-inf"), tl.float32)
    l = tl.full([HEADS], 0.0, tl.float32)
    acc = tl.full([HEADS, LATENT], 0.0, tl.float32)
    for start in range(lo, hi, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        valid = pos < hi
        blk = tl.load(bt_ptr + t * bt_stride + pos // PAGE, mask=valid, other=0)
        blk = tl.minimum(tl.maximum(blk, 0), num_blocks - 1)
        slot = blk.to(tl.int64) * PAGE + pos % PAGE
        kv = tl.load(cache_ptr + slot[:, None] * LATENT + offs_d[None, :], mask=valid[:, None], other=0.0)
        kv = kv.to(tl.float32) * kv_scale  # [BLOCK_N, LATENT]: key and value (MLA)
        scores = tl.dot(q, tl.trans(kv), input_precision="ieee")  # [HEADS, BLOCK_N]
        scores = tl.where(valid[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))  # finite: each chunk has a valid key
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, kv, input_precision="ieee")
        m = m_new
    if DIRECT:
        if GUARD_EMPTY:
            l = tl.where(l > 0, l, 1.0)
        tl.store(out_ptr + t * (HEADS * LATENT) + hd, acc / l[:, None])
    else:
        base = out_ptr + (t * tl.num_programs(1) + s) * (HEADS * (LATENT + 2))
        tl.store(base + offs_h[:, None] * (LATENT + 2) + offs_d[None, :], acc)
        tl.store(base + offs_h * (LATENT + 2) + LATENT, m)
        tl.store(base + offs_h * (LATENT + 2) + LATENT + 1, l)


@triton.jit
def combine_splits_kernel(
    part_ptr,  # [T, num_splits, HEADS, LATENT + 2], every split written (empty ones as (0, -inf, 0))
    out_ptr,  # [T, HEADS, LATENT]
    num_splits,
    HEADS: tl.constexpr,
    LATENT: tl.constexpr,
    SPLITS: tl.constexpr,  # power of two >= num_splits
    GUARD_EMPTY: tl.constexpr,
):
    """Stage two of split-KV decoding, one program per token row: merge the splits' partial softmaxes.

    A row whose every split is empty (a padded row, seq_len 0) ends with sum 0 and acc 0.
    With ``GUARD_EMPTY`` it is written as 0; without, ``0 / 0`` writes NaN.
    """
    t = tl.program_id(0)
    offs_s = tl.arange(0, SPLITS)
    offs_h = tl.arange(0, HEADS)
    offs_d = tl.arange(0, LATENT)
    used = offs_s < num_splits
    # [SPLITS, HEADS] offsets of each split's (acc, max, sum) rows
    sh = (t * num_splits + offs_s)[:, None] * (HEADS * (LATENT + 2)) + offs_h[None, :] * (LATENT + 2)
    m_s = tl.load(part_ptr + sh + LATENT, mask=used[:, None], other=float("-inf"))
    l_s = tl.load(part_ptr + sh + LATENT + 1, mask=used[:, None], other=0.0)
    acc_s = tl.load(part_ptr + sh[:, :, None] + offs_d[None, None, :], mask=used[:, None, None], other=0.0)
    m = tl.max(m_s, axis=0)  # [HEADS]
    m = tl.where(m == float("-inf"), 0.0, m)  # no keys at all: every weight below is exp(-inf) = 0
    w = tl.exp(m_s - m[None, :])  # [SPLITS, HEADS]
    l = tl.sum(w * l_s, axis=0)
    acc = tl.sum(w[:, :, None] * acc_s, axis=0)  # [HEADS, LATENT]
    if GUARD_EMPTY:
        out = acc / tl.where(l > 0, l, 1.0)[:, None]
    else:
        out = acc / l[:, None]
    tl.store(out_ptr + t * (HEADS * LATENT) + offs_h[:, None] * LATENT + offs_d[None, :], out)


def latent_attention(
    target: LatentTarget,
    *,
    rows: int,
    num_splits: int,
    block_table: torch.Tensor,
    lengths: torch.Tensor | None = None,
    split_len: int = 0,
    bounds: torch.Tensor | None = None,
    used_splits: torch.Tensor | None = None,
    kv_scale: float = 1.0,
    guard_empty: bool = True,
    block_n: int = 32,
) -> torch.Tensor:
    """Attention of ``target.q``'s first ``rows`` token rows over ``target.kv_cache``; returns a new
    ``[rows, HEADS, LATENT]`` tensor.

    Give either ``lengths`` + ``split_len`` or ``bounds`` + ``used_splits`` (see
    :func:`latent_attention_partial_kernel`).  Stage one runs ``rows x num_splits``
    programs; with several splits its intermediate is allocated here, inside forward, with
    ``torch.empty`` (fine under a graph: its shape depends only on host values that are
    fixed per graph), and stage two merges it.
    """
    H, L = target.HEADS, target.LATENT
    from_bounds = bounds is not None
    direct = num_splits == 1
    out = torch.empty(rows, H, L, device=target.device)
    partial = out if direct else torch.empty(rows, num_splits, H, L + 2, device=target.device)
    latent_attention_partial_kernel[(rows, num_splits)](
        target.q,
        target.kv_cache,
        block_table,
        partial,
        lengths,
        split_len,
        bounds,
        used_splits,
        block_table.stride(0),
        bounds.stride(0) if bounds is not None else 0,
        target.spec.num_blocks,
        target.sm_scale,
        kv_scale,
        HEADS=H,
        LATENT=L,
        PAGE=target.spec.block_size,
        BLOCK_N=block_n,
        FROM_BOUNDS=from_bounds,
        DIRECT=direct,
        GUARD_EMPTY=guard_empty,
    )
    if not direct:
        combine_splits_kernel[(rows,)](
            partial, out, num_splits, HEADS=H, LATENT=L, SPLITS=next_pow2(num_splits), GUARD_EMPTY=guard_empty
        )
    return out

"""Varlen paged attention in Triton for mixed prefill + decode batches (Support.ALWAYS).

Tokens are packed: request ``r`` owns rows ``cu_query_lens[r] .. cu_query_lens[r+1]``.
``prepare`` writes per-token metadata (``token_req``: the token's request, ``tok_len``: how
many keys it sees, causal) and the slot mapping into persistent buffers; padded token rows
get ``token_req 0``, ``tok_len 0`` and the pad slot.  ``forward`` stores the new K/V and
runs one program per token row that loops over key blocks.

``VarlenAttention`` is safe.  It is also the "all zeros is a real write" case: for a batch
of one request, ``token_req`` is rewritten every step with all zeros (padding included),
which a write ledger that looks for changed bytes can mistake for "not written".
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from graphsafe import Batch, CaptureSpec, Support  # noqa: E402

from ._common import SCALE, D, H, PagedTarget, padded_table, token_rows, write_rows  # noqa: E402

SPEC = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=16, block_size=8)
NEG = tl.constexpr(-1e30)


@triton.jit
def _attend(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    row,
    req,
    n_keys,
    max_kv_blocks,
    bt_stride,
    scale,
    H: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
):
    """Softmax attention of token ``row`` (all heads) over the first ``n_keys`` keys of ``req``."""
    h = tl.arange(0, H)
    d = tl.arange(0, D)
    offs = tl.arange(0, BS)
    q = tl.load(q_ptr + (row * H + h[:, None]) * D + d[None, :])
    m = tl.full([H], NEG, tl.float32)
    l = tl.zeros([H], tl.float32)
    acc = tl.zeros([H, D], tl.float32)
    for b in range(0, max_kv_blocks):
        pos = b * BS + offs
        mask = pos < n_keys
        blk = tl.load(bt_ptr + req * bt_stride + b)
        kv_off = ((blk * BS + offs)[:, None, None] * H + h[None, :, None]) * D + d[None, None, :]
        k = tl.load(k_ptr + kv_off, mask=mask[:, None, None], other=0.0)
        v = tl.load(v_ptr + kv_off, mask=mask[:, None, None], other=0.0)
        sc = tl.where(mask[:, None], tl.sum(k * q[None, :, :], axis=2) * scale, NEG)
        m_new = tl.maximum(m, tl.max(sc, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.where(mask[:, None], tl.exp(sc - m_new[None, :]), 0.0)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v, axis=0)
        m = m_new
    ok = l > 0
    return tl.where(ok[:, None], acc / tl.where(ok, l, 1.0)[:, None], 0.0)


@triton.jit
def _varlen_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    tok_req_ptr,
    tok_len_ptr,
    rows_ptr,
    out_ptr,
    max_kv_blocks,
    bt_stride,
    scale,
    H: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    INDIRECT: tl.constexpr,
):
    """One program per token row (or per entry of ``rows`` when INDIRECT; entries < 0 are padding)."""
    i = tl.program_id(0)
    if INDIRECT:
        row = tl.load(rows_ptr + i)
    else:
        row = i
    live = row >= 0
    row = tl.where(live, row, 0)
    req = tl.load(tok_req_ptr + row)
    n_keys = tl.where(live, tl.load(tok_len_ptr + row), 0)
    out = _attend(q_ptr, k_ptr, v_ptr, bt_ptr, row, req, n_keys, max_kv_blocks, bt_stride, scale, H, D, BS)
    h = tl.arange(0, H)
    d = tl.arange(0, D)
    # the row's width as a bound, not `live & (d < D)`: Triton 3.9's interpreter rejects a block mask combined
    # with a scalar boolean ("mask has unsupported dtype")
    tl.store(out_ptr + (row * H + h[:, None]) * D + d[None, :], out, mask=d[None, :] < tl.where(live, D, 0))


@triton.jit
def _decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    seq_lens_ptr,
    dec_req_ptr,
    dec_row_ptr,
    out_ptr,
    max_kv_blocks,
    bt_stride,
    scale,
    H: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    INDIRECT: tl.constexpr,
):
    """One program per decode request: its single query token sees all ``seq_len`` keys.

    Without INDIRECT, program ``i`` is request ``i`` and token row ``i`` (a pure decode batch).
    """
    i = tl.program_id(0)
    if INDIRECT:
        req = tl.load(dec_req_ptr + i)
        row = tl.load(dec_row_ptr + i)
    else:
        req = i
        row = i
    live = row >= 0
    req = tl.where(live, req, 0)
    row = tl.where(live, row, 0)
    n_keys = tl.where(live, tl.load(seq_lens_ptr + req), 0)
    out = _attend(q_ptr, k_ptr, v_ptr, bt_ptr, row, req, n_keys, max_kv_blocks, bt_stride, scale, H, D, BS)
    h = tl.arange(0, H)
    d = tl.arange(0, D)
    # the row's width as a bound, not `live & (d < D)`: Triton 3.9's interpreter rejects a block mask combined
    # with a scalar boolean ("mask has unsupported dtype")
    tl.store(out_ptr + (row * H + h[:, None]) * D + d[None, :], out, mask=d[None, :] < tl.where(live, D, 0))


class VarlenAttention(PagedTarget):
    """Safe: per-token metadata in persistent buffers, the key-block loop bound from the spec.

    For a one-request batch ``token_req`` is all zeros every step (padded rows point at
    request 0 with ``tok_len 0``): a full rewrite with the same bytes.  Expected: none.
    """

    support = Support.ALWAYS
    default_spec = SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        T = self.max_tokens
        self.token_req = torch.zeros(T, dtype=torch.int32, device=self.device)
        self.tok_len = torch.zeros(T, dtype=torch.int32, device=self.device)
        self.seq_lens = torch.zeros(spec.max_reqs, dtype=torch.int32, device=self.device)
        self.block_table = torch.zeros(spec.max_reqs, self.bps, dtype=torch.int32, device=self.device)
        self.out = torch.zeros(T, H, D, device=self.device)
        self.max_kv_blocks = self.bps  # every later batch fits

    def write_metadata(self, batch: Batch) -> None:
        rows = token_rows(batch, self.bs)
        write_rows(self.token_req, [r for r, _, _, _ in rows], 0)
        write_rows(self.tok_len, [pos + 1 for _, _, pos, _ in rows], 0)
        write_rows(self.seq_lens, list(batch.seq_lens), 0)
        write_rows(self.block_table, padded_table(batch, self.bps), 0)

    def prepare(self, batch: Batch) -> None:
        self.set_sizes(batch)
        self.write_inputs(batch)
        self.write_metadata(batch)

    def launch_varlen(self, grid: int, rows=None) -> None:
        _varlen_kernel[(grid,)](
            self.q,
            self.k_flat,
            self.v_flat,
            self.block_table,
            self.token_req,
            self.tok_len,
            self.tok_len if rows is None else rows,
            self.out,
            self.max_kv_blocks,
            self.block_table.stride(0),
            SCALE,
            H=H,
            D=D,
            BS=self.bs,
            INDIRECT=rows is not None,
        )

    def launch_decode(self, grid: int, reqs=None, rows=None) -> None:
        _decode_kernel[(grid,)](
            self.q,
            self.k_flat,
            self.v_flat,
            self.block_table,
            self.seq_lens,
            self.seq_lens if reqs is None else reqs,
            self.seq_lens if rows is None else rows,
            self.out,
            self.max_kv_blocks,
            self.block_table.stride(0),
            SCALE,
            H=H,
            D=D,
            BS=self.bs,
            INDIRECT=rows is not None,
        )

    def attention(self) -> None:
        self.launch_varlen(self.num_rows)

    def forward(self):
        self.write_kv(self.num_rows)
        self.attention()
        return self.out[: self.num_rows].reshape(self.num_rows, H * D)


# -- unpersisted-metadata --------------------------------------------------------------------
class PaddedPathMetadata(VarlenAttention):
    """Buggy (unpersisted metadata): the capture path and the replay path write different buffers.

    How it happens: the builder keeps an eager copy and a CUDA-graph copy of ``tok_len`` and
    decides which one to fill by whether the batch is padded ("padded means we are replaying
    a graph").  The capture runs the unpadded worst-case batch, so the graph reads the eager
    copy; padded replays then write the graph copy, which the graph never reads; both stay
    alive (SGLang #26134/#26019: capture and replay metadata paths diverged; vLLM #38311).
    Expected: unpersisted-metadata on ``self.tok_len_eager``.
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.tok_len_eager = self.tok_len
        self.tok_len_graph = torch.zeros_like(self.tok_len)

    def write_metadata(self, batch: Batch) -> None:
        self.tok_len = self.tok_len_graph if batch.is_padded else self.tok_len_eager
        super().write_metadata(batch)


# -- frozen-host-value: loop bound from the capture batch -----------------------------------
class BatchMaxSeqlenLoop(VarlenAttention):
    """Buggy (frozen host value): the key-block loop bound is this batch's ``max_seqlen``.

    How it happens: the wrapper passes ``cdiv(batch.max_seq_len, block_size)`` to the kernel
    as its loop bound (FlashAttention's ``max_seqlen_k``).  Captured at the worst case the
    bound covers everything; captured with a shorter batch, every later longer batch loses
    its tail keys (vLLM #25490, #42885).  Expected: frozen-host-value.
    """

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.max_kv_blocks = triton.cdiv(batch.max_seq_len, self.bs)


# -- frozen-host-value: batch composition --------------------------------------------------
class SplitDecodePrefill(VarlenAttention):
    """Safe: decode requests go to a decode kernel, the rest to the varlen kernel.

    ``prepare`` lists the decode requests (and their token rows) and the prefill token rows,
    padded with -1; both kernels are launched every step over the most entries one graph
    can have, and entries of -1 exit, so no host count from the batch is frozen.
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.dec_req = torch.full((spec.max_reqs,), -1, dtype=torch.int32, device=self.device)
        self.dec_row = torch.full((spec.max_reqs,), -1, dtype=torch.int32, device=self.device)
        self.pre_row = torch.full((self.max_tokens,), -1, dtype=torch.int32, device=self.device)

    def write_metadata(self, batch: Batch) -> None:
        super().write_metadata(batch)
        cu = batch.cu_query_lens
        decodes = [r for r, q in enumerate(batch.query_lens) if q == 1]
        prefill_rows = [t for r, q in enumerate(batch.query_lens) if q > 1 for t in range(cu[r], cu[r + 1])]
        write_rows(self.dec_req, decodes, -1)
        write_rows(self.dec_row, [cu[r] for r in decodes], -1)
        write_rows(self.pre_row, prefill_rows, -1)
        self.num_decodes = len(decodes)
        self.num_prefill_tokens = len(prefill_rows)

    def attention(self) -> None:
        self.launch_decode(self.num_slots, self.dec_req, self.dec_row)
        self.launch_varlen(self.num_rows, self.pre_row)


class DecodePrefillHostCounts(SplitDecodePrefill):
    """Buggy (frozen host value): kernels launched only if this batch has such requests.

    How it happens: the wrapper computes ``num_decodes`` / ``num_prefill_tokens`` on the host
    and writes ``if num_prefills > 0: prefill_kernel[...]`` with the count as the grid.  The
    capture batch's composition is frozen: captured with only prefills (the worst case, every
    request at ``max_query_len``) the graph never runs the decode kernel, captured with only
    decodes (a minimal dummy batch) it never runs the prefill kernel.  Expected:
    frozen-host-value (the live rows nobody writes are a consequence, not the cause).
    """

    def attention(self) -> None:
        if self.num_decodes > 0:
            self.launch_decode(self.num_decodes, self.dec_req, self.dec_row)
        if self.num_prefill_tokens > 0:
            self.launch_varlen(self.num_prefill_tokens, self.pre_row)


# -- frozen-host-value: kernel choice --------------------------------------------------------
class DecodeKernelChoice(VarlenAttention):
    """Buggy (frozen host value): a Python branch on ``max_query_len`` picks the kernel.

    How it happens: ``if batch.max_query_len == 1`` the wrapper runs the decode kernel (row
    ``i`` is request ``i``), else the varlen kernel (vLLM #27114 and FlashInfer #1968: kernel
    choice made on the host).  The branch taken at capture is frozen: a graph captured with
    a pure decode batch runs the decode kernel on later mixed batches.  The worst-case
    capture takes the varlen branch, which is right for everything.  Expected:
    frozen-host-value.
    """

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.pure_decode = batch.max_query_len == 1

    def attention(self) -> None:
        if self.pure_decode:
            self.launch_decode(self.num_slots)
        else:
            self.launch_varlen(self.num_rows)

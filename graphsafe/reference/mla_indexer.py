"""``mla_indexer``: per-token expansion of request metadata for speculative decoding (vLLM PR #39458).

With several draft tokens per request, the MLA indexer turns request-level metadata
(sequence lengths, query start offsets, block-table rows) into per-token rows on the
device, then each token writes its new key into the paged cache and attends over its own
prefix.  Two things go wrong under a captured graph: request slots past this step's
requests keep an earlier batch's lengths and block rows unless ``prepare`` resets them,
so padded tokens write keys into blocks that now belong to someone else; and a fast path
chosen in Python for uniform batches (token ``t`` belongs to request ``t // decode_len``)
is frozen into the graph together with ``decode_len``.

Data flow: ``prepare`` writes ``seq_lens``, ``query_start_loc`` and ``block_table`` for the
live requests (the fixed variant also resets every slot after them) and the queries and
new keys of the live tokens.  ``forward`` (a) expands to per-token key counts and block
rows, finding each token's request from ``query_start_loc`` on the device, (b) writes each
token's new key at position ``len - 1``, (c) runs paged attention for every token row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..contract import Batch, CaptureSpec, Support
from ._common import LatentTarget, latent_attention, live_inputs, next_pow2, request_tensors, write_prefix

__all__ = ["MLAIndexer", "MLAIndexerNoTailZero", "MLAIndexerFrozenUniformBranch"]

BLOCK_N = 64


@triton.jit
def _expand_tokens_kernel(
    seq_lens_ptr,  # [max_reqs]
    qsl_ptr,  # [max_reqs + 1] query_start_loc
    bt_ptr,  # [max_reqs, BPS]
    tok_len_ptr,  # [T] out: keys each token row sees (0: padding)
    tok_bt_ptr,  # [T, BPS] out: each token row's block-table row (zeros: padding)
    num_slots,
    decode_len,  # UNIFORM only: host scalar, tokens per request
    BPS: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_B: tl.constexpr,
    UNIFORM: tl.constexpr,
):
    """Step (a), one program per token row t: find t's request r and expand r's metadata.

    General path: r is the number of slots whose query range ends at or before t, read
    from ``query_start_loc`` on the device.  ``UNIFORM`` fast path: r = t // decode_len.
    The key count is clamped to [0, BPS * PAGE], so even inconsistent (stale) metadata
    stays in bounds.
    """
    t = tl.program_id(0)
    if UNIFORM:
        r = t // decode_len
        start = r * decode_len
        end = start + decode_len
    else:
        offs_r = tl.arange(0, BLOCK_R)
        ends = tl.load(qsl_ptr + 1 + offs_r, mask=offs_r < num_slots, other=2147483647)
        r = tl.sum((ends <= t).to(tl.int32), axis=0)
        start = tl.load(qsl_ptr + tl.where(r < num_slots, r, 0))
        end = tl.load(qsl_ptr + tl.where(r < num_slots, r, 0) + 1)
    live = r < num_slots
    rr = tl.where(live, r, 0)
    seq = tl.load(seq_lens_ptr + rr)
    n = seq - (end - start) + (t - start) + 1
    n = tl.minimum(tl.maximum(n, 0), BPS * PAGE)
    tl.store(tok_len_ptr + t, tl.where(live, n, 0))
    offs_b = tl.arange(0, BLOCK_B)
    row = tl.load(bt_ptr + rr * BPS + offs_b, mask=offs_b < BPS, other=0)
    tl.store(tok_bt_ptr + t * BPS + offs_b, tl.where(live, row, 0), mask=offs_b < BPS)


@triton.jit
def _write_new_kv_kernel(
    k_new_ptr,  # [T, LATENT]
    cache_ptr,  # [num_blocks, PAGE, LATENT]
    tok_len_ptr,
    tok_bt_ptr,
    BPS: tl.constexpr,
    LATENT: tl.constexpr,
    PAGE: tl.constexpr,
):
    """Token row t stores its new latent key at position len_t - 1 of its sequence (nothing when len_t == 0)."""
    t = tl.program_id(0)
    n = tl.load(tok_len_ptr + t)
    has = n > 0
    pos = tl.maximum(n - 1, 0)
    blk = tl.load(tok_bt_ptr + t * BPS + pos // PAGE, mask=has, other=0)
    offs_d = tl.arange(0, LATENT)
    k = tl.load(k_new_ptr + t * LATENT + offs_d)
    dst = cache_ptr + (blk.to(tl.int64) * PAGE + pos % PAGE) * LATENT + offs_d
    # the row's length as a bound, not `(offs_d < LATENT) & has`: Triton 3.9's interpreter rejects a block
    # mask combined with a scalar boolean ("mask has unsupported dtype")
    tl.store(dst, k, mask=offs_d < tl.where(has, LATENT, 0))


class MLAIndexer(LatentTarget):
    """Fixed: ``prepare`` resets every request slot after the live ones ("zero the tail,
    clamp padded rows": ``seq_len`` 0, ``query_start_loc`` = ``num_tokens``, block row 0) and
    ``forward`` always runs the general expansion, which reads everything on the device."""

    name = "mla_indexer"
    support = Support.ALWAYS
    default_spec = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=64, block_size=16)

    #: reset request slots and token rows past this batch in prepare()
    zero_tail = True

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        dev, i32 = self.device, torch.int32
        bps = spec.blocks_per_seq
        # request level, written by prepare()
        self.seq_lens = torch.zeros(spec.max_reqs, dtype=i32, device=dev)
        self.query_start_loc = torch.zeros(spec.max_reqs + 1, dtype=i32, device=dev)
        self.block_table = torch.zeros(spec.max_reqs, bps, dtype=i32, device=dev)
        self.k_new = torch.zeros(self.max_tokens, self.LATENT, device=dev)
        # token level, written by forward()'s expansion kernel
        self.tok_len = torch.zeros(self.max_tokens, dtype=i32, device=dev)
        self.tok_bt = torch.zeros(self.max_tokens, bps, dtype=i32, device=dev)

    def prepare(self, batch: Batch) -> None:
        self.num_slots = batch.num_slots
        seq_lens, qsl, table = request_tensors(batch, self.spec)
        dev, z = self.device, self.zero_tail
        write_prefix(self.seq_lens, seq_lens.to(dev), zero_tail=z)
        write_prefix(self.block_table, table.to(dev), zero_tail=z)
        self.query_start_loc[: batch.num_reqs + 1].copy_(qsl.to(dev))
        if z:
            # Padded slots get an empty query range at the end of the live tokens.
            self.query_start_loc[batch.num_reqs + 1 :].fill_(batch.num_tokens)
        self.write_queries(batch, zero_tail=z)
        write_prefix(self.k_new, live_inputs(batch, "k_new", (self.LATENT,), dev), zero_tail=z)

    def expand(self, T: int, *, uniform: bool = False, decode_len: int = 1) -> None:
        """Step (a): per-token key counts and block rows for token rows [0, T)."""
        spec = self.spec
        _expand_tokens_kernel[(T,)](
            self.seq_lens,
            self.query_start_loc,
            self.block_table,
            self.tok_len,
            self.tok_bt,
            self.num_slots,
            decode_len,
            BPS=spec.blocks_per_seq,
            PAGE=spec.block_size,
            BLOCK_R=next_pow2(spec.max_reqs),
            BLOCK_B=next_pow2(spec.blocks_per_seq),
            UNIFORM=uniform,
        )

    def forward(self):
        T, bps, page = self.num_token_rows, self.spec.blocks_per_seq, self.spec.block_size
        # (a) request-level metadata -> per-token key counts and block rows
        self.expand(T)
        # (b) each live token stores its new latent key in the paged cache
        _write_new_kv_kernel[(T,)](
            self.k_new, self.kv_cache, self.tok_len, self.tok_bt, BPS=bps, LATENT=self.LATENT, PAGE=page
        )
        # (c) one split covering all of each token's keys
        return latent_attention(
            self,
            rows=T,
            num_splits=1,
            block_table=self.tok_bt,
            lengths=self.tok_len,
            split_len=bps * page,
            block_n=BLOCK_N,
        )


class MLAIndexerNoTailZero(MLAIndexer):
    """Buggy: ``prepare`` writes only the live slots and leaves the tail alone.

    After a larger batch (the capture batch, say) the padded slots keep its sequence
    lengths, query ranges and block rows; the expansion gives padded token rows non-zero
    key counts, and they write their (stale or NaN) new keys into blocks that belong to
    other requests: the KV cache differs from an eager run.
    """

    name = "mla_indexer:no_tail_zero"
    expected = "stale-padding"
    zero_tail = False


class MLAIndexerFrozenUniformBranch(MLAIndexer):
    """Buggy: a Python branch picks a uniform fast path for uniform batches.

    ``prepare`` records ``batch.is_uniform`` and ``batch.max_query_len``; ``forward`` branches
    on them and passes ``decode_len`` as a kernel scalar.  The capture batch is uniform, so
    the graph always maps token t to request ``t // decode_len``: wrong for mixed query
    lengths and for uniform batches of another length.
    """

    name = "mla_indexer:frozen_uniform_branch"
    expected = "frozen-host-value"

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.uniform = batch.is_uniform
        self.decode_len = batch.max_query_len

    def expand(self, T: int, **_) -> None:
        if self.uniform:  # BUG: a Python branch on this step's batch, frozen at capture with decode_len
            super().expand(T, uniform=True, decode_len=self.decode_len)
        else:
            super().expand(T)

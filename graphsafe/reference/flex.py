"""``flex``: block-sparse, document-masked attention with per-step metadata (vLLM PR #36298).

FlexAttention-style backends build their block mask every step: for each query, which KV
blocks to visit (``kv_num_blocks``, ``kv_indices``) and which document every key belongs
to (``doc_ids``).  A full CUDA graph only sees that metadata if every step copies it into
the same persistent tensors, preallocated for the largest batch the engine allows: build
fresh tensors each step and the graph keeps reading the capture's; size the persistent
buffers from the batch at hand and the first longer batch reallocates them, leaving the
graph reading freed memory.

Mask: each request's sequence is cut into documents (cut points from the batch seed, see
:func:`document_ids`); a query token at position ``p`` attends to key ``k`` iff ``k <= p``
and both lie in the same document.  ``kv_indices`` lists, per token, the logical KV blocks
from its document's first block to its own block (translated to physical blocks through
``block_table`` in the kernel), so blocks before the document are never read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import triton
import triton.language as tl

from ..contract import Batch, CaptureSpec, Support, capturing
from ..values import derive_seed, seeded
from ._common import ReferenceTarget, live_inputs, next_pow2, request_tensors, token_tensors, write_prefix

__all__ = ["Flex", "FlexFreshMetadata", "FlexBatchSizedBuffers", "FlexMetadata", "document_ids", "build_metadata"]


def document_ids(seq_len: int, seed: int) -> torch.Tensor:
    """Document id (0, 1, 2, ...) of each of ``seq_len`` positions: up to two cut points drawn from ``seed``."""
    gen = torch.Generator().manual_seed(seed & ((1 << 63) - 1))
    cuts = torch.zeros(seq_len, dtype=torch.int32)
    if seq_len > 1:
        n_cuts = int(torch.randint(0, 3, (1,), generator=gen))
        for c in torch.randint(1, seq_len, (n_cuts,), generator=gen).tolist():
            cuts[c] = 1
    return torch.cumsum(cuts, 0, dtype=torch.int32)


@dataclass
class FlexMetadata:
    """One step's block mask and paging, all int32.  Rows: request slots or token rows."""

    block_table: torch.Tensor  # [slots, blocks]          logical -> physical block
    doc_ids: torch.Tensor  # [slots, blocks * block_size]  document id of each key position
    q_req: torch.Tensor  # [tokens]                      request slot of each token row
    q_pos: torch.Tensor  # [tokens]                      absolute position of each token row
    kv_num_blocks: torch.Tensor  # [tokens]               KV blocks to visit (0: padding)
    kv_indices: torch.Tensor  # [tokens, blocks]          logical KV blocks to visit

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to(self, device) -> FlexMetadata:
        return FlexMetadata(**{k: v.to(device) for k, v in self.tensors().items()})

    @classmethod
    def empty(cls, slots: int, tokens: int, blocks: int, block_size: int, device) -> FlexMetadata:
        z = lambda *shape: torch.zeros(*shape, dtype=torch.int32, device=device)  # noqa: E731
        return cls(z(slots, blocks), z(slots, blocks * block_size), z(tokens), z(tokens), z(tokens), z(tokens, blocks))

    def fits(self, other: FlexMetadata) -> bool:
        return all(
            all(a >= b for a, b in zip(mine.shape, theirs.shape))
            for mine, theirs in zip(self.tensors().values(), other.tensors().values())
        )

    def rebind(self, other: FlexMetadata) -> None:
        """Point every field at ``other``'s tensors (the old ones are dropped unless referenced elsewhere)."""
        for name, t in other.tensors().items():
            setattr(self, name, t)

    def copy_from(self, src: FlexMetadata) -> None:
        """copy_to_persistent: write ``src`` into the leading part of these buffers, zero the rest."""
        for name, dst in self.tensors().items():
            s = getattr(src, name)
            view = dst[tuple(slice(0, n) for n in s.shape)]
            dst.zero_()
            view.copy_(s)


def build_metadata(batch: Batch, spec: CaptureSpec, *, slots: int, blocks: int) -> FlexMetadata:
    """This step's metadata on the host: ``slots`` (>= num_reqs) request rows,
    ``num_slots * max_query_len`` token rows (forward's grid), ``blocks`` logical blocks
    per row.  Rows past the live requests and tokens are all zero (no KV blocks to visit)."""
    bs = spec.block_size
    T = batch.num_slots * spec.max_query_len
    meta = FlexMetadata.empty(slots, T, blocks, bs, "cpu")
    _, _, table = request_tensors(batch, spec)
    meta.block_table[: batch.num_reqs] = table[:, :blocks]
    for r, s in enumerate(batch.seq_lens):
        meta.doc_ids[r, :s] = document_ids(s, derive_seed(batch.seed, "docs", r))
    req, pos, _ = token_tensors(batch)
    n = batch.num_tokens
    meta.q_req[:n], meta.q_pos[:n] = req, pos
    for t in range(n):
        docs = meta.doc_ids[int(req[t])]
        p = int(pos[t])
        doc_start = int(torch.nonzero(docs[: p + 1] == docs[p])[0])
        first, last = doc_start // bs, p // bs
        meta.kv_num_blocks[t] = last - first + 1
        meta.kv_indices[t, : last - first + 1] = torch.arange(first, last + 1, dtype=torch.int32)
    return meta


@triton.jit
def _flex_doc_attention_kernel(
    q_ptr,  # [T, HEADS, DIM]
    k_cache_ptr,  # [num_blocks, PAGE, HEADS, DIM]
    v_cache_ptr,
    block_table_ptr,  # [slots, blocks]
    doc_ids_ptr,  # [slots, blocks * PAGE]
    q_req_ptr,  # [T]
    q_pos_ptr,  # [T]
    kv_num_blocks_ptr,  # [T]
    kv_indices_ptr,  # [T, blocks]
    out_ptr,  # [T, HEADS, DIM]
    slots,
    blocks,  # width of block_table / kv_indices rows
    num_blocks,
    sm_scale,
    HEADS: tl.constexpr,
    DIM: tl.constexpr,
    PAGE: tl.constexpr,
    MAX_BLOCKS: tl.constexpr,  # power of two >= blocks
):
    """One program per token row: gather the kv_num_blocks KV blocks listed in its
    kv_indices row and attend with the causal + same-document mask.  Rows with no listed
    block (padding) are written as 0.  Indices read from metadata are clamped to their
    tensors, so stale metadata gives wrong numbers, not illegal accesses."""
    t = tl.program_id(0)
    n = tl.minimum(tl.maximum(tl.load(kv_num_blocks_ptr + t), 0), blocks)
    r = tl.minimum(tl.maximum(tl.load(q_req_ptr + t), 0), slots - 1)
    qp = tl.minimum(tl.maximum(tl.load(q_pos_ptr + t), 0), blocks * PAGE - 1)
    q_doc = tl.load(doc_ids_ptr + r * (blocks * PAGE) + qp)
    offs_h = tl.arange(0, HEADS)
    offs_d = tl.arange(0, DIM)
    hd = offs_h[:, None] * DIM + offs_d[None, :]  # [HEADS, DIM]
    q = tl.load(q_ptr + t * (HEADS * DIM) + hd) * sm_scale
    offs_k = tl.arange(0, MAX_BLOCKS * PAGE)  # key slots of the listed blocks
    i = offs_k // PAGE
    listed = i < n
    lb = tl.load(kv_indices_ptr + t * blocks + i, mask=listed, other=0)
    lb = tl.minimum(tl.maximum(lb, 0), blocks - 1)  # logical block
    pb = tl.load(block_table_ptr + r * blocks + lb, mask=listed, other=0)
    pb = tl.minimum(tl.maximum(pb, 0), num_blocks - 1)  # physical block
    pos = lb * PAGE + offs_k % PAGE
    k_doc = tl.load(doc_ids_ptr + r * (blocks * PAGE) + pos, mask=listed, other=-1)
    valid = listed & (pos <= qp) & (k_doc == q_doc)
    kv_off = (pb.to(tl.int64) * PAGE + offs_k % PAGE)[:, None, None] * (HEADS * DIM) + hd[None, :, :]
    k = tl.load(k_cache_ptr + kv_off, mask=valid[:, None, None], other=0.0)  # [KEYS, HEADS, DIM]
    v = tl.load(v_cache_ptr + kv_off, mask=valid[:, None, None], other=0.0)
    scores = tl.sum(k * q[None, :, :], axis=2)  # [KEYS, HEADS]
    scores = tl.where(valid[:, None], scores, float("-inf"))
    m = tl.max(scores, axis=0)
    m = tl.where(m == float("-inf"), 0.0, m)
    p = tl.exp(scores - m[None, :])
    l = tl.sum(p, axis=0)
    acc = tl.sum(p[:, :, None] * v, axis=0)  # [HEADS, DIM]
    tl.store(out_ptr + t * (HEADS * DIM) + hd, acc / tl.where(l > 0, l, 1.0)[:, None])


class Flex(ReferenceTarget):
    """Fixed: persistent metadata buffers sized for the spec maximum in ``setup``; ``prepare``
    builds the step's metadata and copies it into them (``copy_to_persistent``)."""

    name = "flex"
    support = Support.ALWAYS
    default_spec = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=64, block_size=16)

    HEADS = 2
    DIM = 16

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.sm_scale = 1.0 / math.sqrt(self.DIM)
        shape = (spec.num_blocks, spec.block_size, self.HEADS, self.DIM)
        self.k_cache = seeded(shape, seed=derive_seed(0, "flex", "k_cache"), device=self.device)
        self.v_cache = seeded(shape, seed=derive_seed(0, "flex", "v_cache"), device=self.device)
        self.q = torch.zeros(self.max_tokens, self.HEADS, self.DIM, device=self.device)
        # Engines keep the attention state each graph was captured with alive (see forward()).
        self.captured_meta: dict[int, FlexMetadata] = {}
        self.meta = FlexMetadata.empty(
            spec.max_reqs, self.max_tokens, spec.blocks_per_seq, spec.block_size, self.device
        )

    def prepare(self, batch: Batch) -> None:
        self.num_slots = batch.num_slots
        write_prefix(self.q, live_inputs(batch, "q", (self.HEADS, self.DIM), self.device))
        self.store_metadata(batch)

    def store_metadata(self, batch: Batch) -> None:
        fresh = build_metadata(batch, self.spec, slots=batch.num_slots, blocks=self.spec.blocks_per_seq)
        self.meta.copy_from(fresh.to(self.device))  # copy_to_persistent: same tensors every step

    def forward(self):
        meta, T = self.meta, self.num_token_rows
        if capturing():
            self.captured_meta[self.num_slots] = meta
        slots, blocks = meta.block_table.shape
        out = torch.empty(T, self.HEADS, self.DIM, device=self.device)
        _flex_doc_attention_kernel[(T,)](
            self.q,
            self.k_cache,
            self.v_cache,
            meta.block_table,
            meta.doc_ids,
            meta.q_req,
            meta.q_pos,
            meta.kv_num_blocks,
            meta.kv_indices,
            out,
            slots,
            blocks,
            self.spec.num_blocks,
            self.sm_scale,
            HEADS=self.HEADS,
            DIM=self.DIM,
            PAGE=self.spec.block_size,
            MAX_BLOCKS=next_pow2(blocks),
        )
        return out

    def static(self):
        return {"k_cache": self.k_cache, "v_cache": self.v_cache}


class FlexFreshMetadata(Flex):
    """Buggy: ``prepare`` rebinds ``self.meta`` to the step's freshly built tensors.

    The metadata the graph was captured with stays alive (``captured_meta``) but is never
    written again, so every replay uses the capture batch's block mask.
    """

    name = "flex:fresh_metadata"
    expected = "unpersisted-metadata"

    def store_metadata(self, batch: Batch) -> None:
        fresh = build_metadata(batch, self.spec, slots=batch.num_slots, blocks=self.spec.blocks_per_seq)
        self.meta = fresh.to(self.device)


class FlexBatchSizedBuffers(Flex):
    """Buggy: the persistent buffers are sized from the batch at hand (``num_reqs`` request
    rows, ``ceil(batch.max_seq_len / block_size)`` blocks) when it is the first or does not
    fit, and reallocated then, dropping the old ones; a graph captured with a small batch
    reads freed memory once a batch with more requests or longer sequences arrives."""

    name = "flex:batch_sized_buffers"
    expected = "stale-pointer"

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.meta = FlexMetadata.empty(0, 0, 0, spec.block_size, self.device)  # grown by prepare()

    def store_metadata(self, batch: Batch) -> None:
        blocks = math.ceil(batch.max_seq_len / self.spec.block_size)
        fresh = build_metadata(batch, self.spec, slots=batch.num_reqs, blocks=blocks)
        if not self.meta.fits(fresh):
            # Grow to this batch; the old tensors lose their last reference and are freed.
            tokens = batch.num_slots * self.spec.max_query_len
            self.meta.rebind(FlexMetadata.empty(batch.num_reqs, tokens, blocks, self.spec.block_size, self.device))
        self.meta.copy_from(fresh.to(self.device))

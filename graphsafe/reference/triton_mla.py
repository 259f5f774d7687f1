"""``triton_mla``: split-KV MLA decode with an fp8-style per-tensor output scale (vLLM PR #42885).

TRITON_MLA decode became safe to capture as a FULL graph (UNIFORM_BATCH) because the
capture uses the worst-case ``max_seq_len``: the split count, the split length and the
intermediate allocated inside the kernel wrapper are then good for every later batch.
Derive them from the batch instead and a graph captured on short sequences silently
ignores the tail of longer ones; and since padded rows have ``seq_len == 0``, a stage two
that does not guard the empty sum writes NaN there, which a batch-wide output scale then
spreads into every live row.

Data flow: ``prepare`` writes per-token key counts and block-table rows (host-expanded)
into persistent buffers; ``forward`` runs stage one (one program per token row and
split, writing ``(max, sum, acc)`` into an intermediate made with ``torch.empty``),
stage two (merge the splits) and returns ``(out / scale, scale)`` with
``scale = max |out|`` over all token rows.
"""

from __future__ import annotations

import torch
import triton

from ..contract import Batch, CaptureSpec, Support
from ._common import LatentTarget, latent_attention, request_tensors, token_tensors, write_prefix

__all__ = ["TritonMLA", "TritonMLACaptureMaxSeqLen", "TritonMLANanPadding", "kv_split_plan"]

MAX_KV_SPLITS = 4
MIN_SPLIT_LEN = 32
BLOCK_N = 32


def kv_split_plan(max_seq_len: int) -> tuple[int, int]:
    """``(num_kv_splits, split_len)`` that cover ``max_seq_len`` keys: at most 4 splits of >= 32 keys."""
    num_splits = max(1, min(MAX_KV_SPLITS, triton.cdiv(max_seq_len, MIN_SPLIT_LEN)))
    return num_splits, triton.cdiv(max_seq_len, num_splits)


class TritonMLA(LatentTarget):
    """Fixed: the split count and split length come from ``spec.max_seq_len`` (set once in
    ``setup``), and stage two writes 0 for rows with no keys, so padded rows cannot reach
    the batch-wide scale as NaN."""

    name = "triton_mla"
    support = Support.UNIFORM_BATCH
    default_spec = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=64, block_size=16)

    #: stage two's guard for rows with no keys (seq_len 0)
    guard_empty_rows = True

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.tok_len = torch.zeros(self.max_tokens, dtype=torch.int32, device=self.device)
        self.tok_bt = torch.zeros(self.max_tokens, spec.blocks_per_seq, dtype=torch.int32, device=self.device)
        # Worst case of the spec: every later batch fits in these splits.
        self.num_kv_splits, self.split_len = kv_split_plan(spec.max_seq_len)

    def prepare(self, batch: Batch) -> None:
        self.num_slots = batch.num_slots
        self.write_queries(batch)
        _, _, table = request_tensors(batch, self.spec)
        req, _, lens = token_tensors(batch)
        write_prefix(self.tok_len, lens.to(self.device))
        write_prefix(self.tok_bt, table[req.long()].to(self.device))

    def forward(self):
        # Stage one: program (t, s) covers keys [s * split_len, (s + 1) * split_len) of row t's
        # tok_len[t] keys; stage two merges the splits.  Host values: rows, splits, split_len.
        out = latent_attention(
            self,
            rows=self.num_token_rows,
            num_splits=self.num_kv_splits,
            block_table=self.tok_bt,
            lengths=self.tok_len,
            split_len=self.split_len,
            guard_empty=self.guard_empty_rows,
            block_n=BLOCK_N,
        )
        # Per-tensor output scale over every token row (as before an fp8 output cast).
        scale = out.abs().amax().clamp(min=1e-6).reshape(1)
        return out / scale, scale

    def live(self, outputs, batch: Batch):
        out, scale = outputs
        return out[: batch.num_tokens], scale


class TritonMLACaptureMaxSeqLen(TritonMLA):
    """Buggy: ``prepare`` derives the split count and split length from ``batch.max_seq_len``.

    ``forward`` passes them as grid size and kernel scalar, so a graph captured with short
    sequences covers only ``num_kv_splits * split_len`` keys of every later batch.
    """

    name = "triton_mla:capture_max_seq_len"
    expected = "frozen-host-value"

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.num_kv_splits, self.split_len = kv_split_plan(batch.max_seq_len)


class TritonMLANanPadding(TritonMLA):
    """Buggy: stage two divides by the split sum without guarding rows of length 0.

    Padded rows become ``0 / 0 = NaN`` and the batch-wide ``amax`` scale turns every live
    row into NaN (eagerly too, whenever a token row is padding).
    """

    name = "triton_mla:nan_padding"
    expected = "stale-padding"
    guard_empty_rows = False

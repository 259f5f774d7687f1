"""``flashmla_fp8``: decode over an FP8 (e4m3) latent cache with per-step scheduler metadata (vLLM PR #35175).

The FP8 FlashMLA decode path gets its scheduler metadata (``tile_scheduler_metadata``,
``num_splits``) from a function that returns new tensors every step.  After a refactor
that path stored those tensors directly instead of copying them into the persistent
CUDA-graph buffers, so replays read the addresses of the capture step's tensors, long
freed and reused: garbage output with an fp8 KV cache.  The fix copies the metadata into
buffers allocated once for the largest batch.

FP8: the cache is a ``torch.float8_e4m3fn`` tensor read directly by the kernel
(``tl.load`` of float8e4nv, ``.to(tl.float32)``, times a per-tensor ``kv_scale``).  That
works under the Triton interpreter (CPU) and on GPUs with native e4m3 (sm_89+: Ada,
Hopper); older GPUs would need the cache stored as uint8 and decoded by hand.
"""

from __future__ import annotations

import torch

from ..contract import Batch, CaptureSpec, Support
from ._common import LatentTarget, latent_attention, request_tensors, write_prefix

__all__ = ["FlashMLAFP8", "FlashMLAFP8FreshBuffers", "get_mla_metadata"]

MAX_SPLITS = 2
MIN_SPLIT_LEN = 32
BLOCK_N = 32


def get_mla_metadata(seq_lens: torch.Tensor, max_splits: int = MAX_SPLITS) -> tuple[torch.Tensor, torch.Tensor]:
    """Scheduler metadata for one step, as NEW tensors (like FlashMLA's ``get_mla_metadata``).

    Returns ``tile_scheduler_metadata`` [rows, max_splits + 1] (split s of row r covers
    keys ``[tsm[r, s], tsm[r, s + 1])``) and ``num_splits`` [rows] (up to ``max_splits``
    splits of >= 32 keys; 0 for a padded row), both int32, on ``seq_lens.device``.
    """
    seq = seq_lens.to(torch.int64)
    num_splits = torch.clamp((seq + MIN_SPLIT_LEN - 1) // MIN_SPLIT_LEN, max=max_splits)
    per_split = (seq + num_splits.clamp(min=1) - 1) // num_splits.clamp(min=1)
    s = torch.arange(max_splits + 1, device=seq.device)
    bounds = torch.minimum(s[None, :] * per_split[:, None], seq[:, None])
    return bounds.to(torch.int32), num_splits.to(torch.int32)


class FlashMLAFP8(LatentTarget):
    """Fixed: ``tile_scheduler_metadata`` and ``num_splits`` are copied into persistent
    ``cg_buf_*`` tensors allocated in ``setup`` for ``max_reqs`` rows; ``forward`` reads only those."""

    name = "flashmla_fp8"
    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=64, block_size=16)
    cache_dtype = torch.float8_e4m3fn

    #: per-tensor dequantisation scale of the fp8 cache (a constant, like a calibrated k_scale)
    kv_scale = 0.5

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        dev, i32 = self.device, torch.int32
        self.seq_lens = torch.zeros(spec.max_reqs, dtype=i32, device=dev)
        self.block_table = torch.zeros(spec.max_reqs, spec.blocks_per_seq, dtype=i32, device=dev)
        self.cg_buf_tile_scheduler_metadata = torch.zeros(spec.max_reqs, MAX_SPLITS + 1, dtype=i32, device=dev)
        self.cg_buf_num_splits = torch.zeros(spec.max_reqs, dtype=i32, device=dev)
        self.tile_scheduler_metadata = self.cg_buf_tile_scheduler_metadata
        self.num_splits = self.cg_buf_num_splits

    def prepare(self, batch: Batch) -> None:
        self.num_slots = batch.num_slots
        seq_lens, _, table = request_tensors(batch, self.spec)
        write_prefix(self.seq_lens, seq_lens.to(self.device))
        write_prefix(self.block_table, table.to(self.device))
        self.write_queries(batch)
        # Padded slots have seq_len 0 here, so they get 0 splits.
        self.store_metadata(*get_mla_metadata(self.seq_lens[: batch.num_slots]))

    def store_metadata(self, tile_scheduler_metadata: torch.Tensor, num_splits: torch.Tensor) -> None:
        write_prefix(self.cg_buf_tile_scheduler_metadata, tile_scheduler_metadata)
        write_prefix(self.cg_buf_num_splits, num_splits)

    def forward(self):
        return latent_attention(
            self,
            rows=self.num_slots,
            num_splits=MAX_SPLITS,
            block_table=self.block_table,
            bounds=self.tile_scheduler_metadata,
            used_splits=self.num_splits,
            kv_scale=self.kv_scale,
            block_n=BLOCK_N,
        )


class FlashMLAFP8FreshBuffers(FlashMLAFP8):
    """Buggy: the tensors returned by ``get_mla_metadata`` are stored on ``self`` as they are.

    Each ``prepare`` drops the previous step's tensors (nothing else refers to them), so
    the graph keeps reading the freed memory of the capture step's metadata.
    """

    name = "flashmla_fp8:fresh_buffers"
    expected = "stale-pointer"

    def store_metadata(self, tile_scheduler_metadata: torch.Tensor, num_splits: torch.Tensor) -> None:
        self.tile_scheduler_metadata = tile_scheduler_metadata
        self.num_splits = num_splits

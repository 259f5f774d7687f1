"""A paged KV cache as big as asked: the target behind ``benchmarks/state_size.py`` and the state-size tests.

``PagedKV`` holds one static tensor ``kv_cache[num_blocks, block_size, D]`` (fp32).  forward() writes
this step's tokens into their slots (``block_table[r][pos // block_size] * block_size + pos %
block_size``; padded rows write zeros into the null block 0) and reads them back: a step touches only
its batch's blocks.  ``StrayWrite`` also writes into the cache's last block: a write outside the
blocks of any batch that leaves the last block unused.
"""

from __future__ import annotations

import torch

import graphsafe
from graphsafe import Batch, CaptureSpec, Support

D = 128
BLOCK = 16
#: bytes of one KV block
BLOCK_BYTES = BLOCK * D * 4


_SHAPE = dict(max_reqs=4, max_query_len=2, max_seq_len=64, block_size=BLOCK)


def spec_for(size_bytes: int) -> CaptureSpec:
    """A spec whose cache holds ``size_bytes``, or the smallest cache the spec allows."""
    return CaptureSpec(**_SHAPE, num_blocks=max(size_bytes // BLOCK_BYTES, CaptureSpec(**_SHAPE).num_blocks))


def live_slots(batch: Batch, block_size: int) -> list[int]:
    """The cache slot of each live token, in token order."""
    return [
        batch.block_table[r][p // block_size] * block_size + p % block_size
        for r, (q, s) in enumerate(zip(batch.query_lens, batch.seq_lens))
        for p in range(s - q, s)
    ]


class PagedKV(graphsafe.Target):
    """Safe: forward() writes this step's tokens into their cache slots and reads them back."""

    support = Support.ALWAYS
    default_spec = spec_for(0)

    def setup(self, spec, device):
        t = spec.max_reqs * spec.max_query_len
        self.block_size = spec.block_size
        self.kv = torch.zeros(spec.num_blocks, spec.block_size, D, device=device)
        self.x = torch.zeros(t, D, device=device)
        self.slots = torch.zeros(t, dtype=torch.int64, device=device)
        self.out = torch.zeros(t, D, device=device)

    def static(self):
        return {"kv_cache": self.kv}

    def prepare(self, batch: Batch):
        n = batch.num_tokens
        self.x[:n] = graphsafe.seeded((n, D), seed=batch.seed, device=self.x.device)
        self.x[n:] = 0
        self.slots[:n] = torch.tensor(live_slots(batch, self.block_size), dtype=torch.int64)
        self.pad_slots(n)

    def pad_slots(self, n: int) -> None:
        self.slots[n:] = 0  # padding writes zeros into the null block 0

    def forward(self):
        flat = self.kv.view(-1, D)
        flat.index_copy_(0, self.slots, self.x)
        torch.index_select(flat, 0, self.slots, out=self.out)
        self.out.mul_(2.0)
        return self.out


class StrayWrite(PagedKV):
    """Unsafe: the captured graph also adds 1 to the cache's last block, which eager never touches."""

    def forward(self):
        if graphsafe.capturing():
            self.kv[-1].add_(1.0)
        return super().forward()

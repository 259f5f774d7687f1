"""A paged cache written the way a GPU scatter writes it: two rows aimed at one slot in one launch land in an
undefined order.  The CPU runs a scatter's rows in order, so ``forward()`` draws a fresh order from the default
generator on every run (a CUDA graph draws anew on every replay, and so does the emulator): one slot written
twice keeps either value, and two replays of one batch can differ, exactly when two rows share a slot.

* ``RacyCache``: safe; padded token rows write zeros into the null block 0, which no request owns.
* ``RacyCacheStaleSlots``: padded rows keep the slots of the batch before (the capture batch, at an example's
  first step), so they write zeros into slots that live rows of this batch own, in the same launch
  (FlashInfer's ``stale_padding`` variant, vLLM #57156): stale-padding.
* ``RacyCacheSharedSlot``: padded row ``n + j`` writes into live token ``j``'s slot on every batch, fresh instance
  or not: a race that is not the padding's history, so nondeterministic-replay.
"""

from __future__ import annotations

import torch

import graphsafe
from graphsafe import Batch, CaptureSpec, Support

D = 32
SPEC = CaptureSpec(max_reqs=8, max_query_len=4, max_seq_len=64, block_size=16)


def live_slots(batch: Batch, block_size: int) -> list[int]:
    """The cache slot of each live token, in token order."""
    return [
        batch.block_table[r][p // block_size] * block_size + p % block_size
        for r, (q, s) in enumerate(zip(batch.query_lens, batch.seq_lens))
        for p in range(s - q, s)
    ]


class RacyCache(graphsafe.Target):
    """Safe: each live token writes its own slot; padded rows write zeros into the null block."""

    support = Support.ALWAYS
    default_spec = SPEC

    def setup(self, spec, device):
        rows = spec.max_reqs * spec.max_query_len
        self.block_size = spec.block_size
        self.kv = torch.zeros(spec.num_blocks, spec.block_size, D, device=device)
        self.x = torch.zeros(rows, D, device=device)
        self.slots = torch.zeros(rows, dtype=torch.int64, device=device)
        self.out = torch.zeros(rows, D, device=device)

    def static(self):
        return {"kv_cache": self.kv}

    def prepare(self, batch: Batch):
        n = batch.num_tokens
        self.x[:n] = graphsafe.seeded((n, D), seed=batch.seed, device=self.x.device)
        self.x[n:] = 0
        self.slots[:n] = torch.tensor(live_slots(batch, self.block_size), dtype=torch.int64)
        self.pad_slots(n)

    def pad_slots(self, n: int) -> None:
        self.slots[n:] = 0  # the null block: no request owns it

    def forward(self):
        flat = self.kv.view(-1, D)
        order = torch.rand(self.slots.shape[0], device=self.slots.device).argsort()  # a scatter's undefined order
        flat.index_copy_(0, self.slots[order], self.x[order])
        torch.index_select(flat, 0, self.slots, out=self.out)
        return self.out


class RacyCacheStaleSlots(RacyCache):
    """Buggy: the padded rows keep the slots of the batch before."""

    expected = "stale-padding"

    def pad_slots(self, n: int) -> None:
        pass  # BUG: rows past this batch's tokens keep an earlier batch's slots


class RacyCacheSharedSlot(RacyCache):
    """Buggy: padded row ``n + j`` writes into live token ``j % n``'s slot, on every batch."""

    expected = "nondeterministic-replay"

    def pad_slots(self, n: int) -> None:
        pad = self.slots.shape[0] - n
        self.slots[n:] = self.slots[torch.arange(pad, device=self.slots.device) % max(n, 1)]  # BUG: live slots

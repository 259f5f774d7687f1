"""A paged cache written the way a GPU scatter writes it: two rows aimed at one slot in one launch land in an
undefined order.  The CPU runs a scatter's rows in order, so ``forward()`` draws a fresh order from the default
generator on every run (a CUDA graph draws anew on every replay, and so does the emulator): one slot written
twice keeps either value, and two replays of one batch can differ, exactly when two rows share a slot.

* ``RacyCache``: safe; padded token rows write zeros into the null block 0, which no request owns.
* ``RacyCacheStaleSlots``: padded rows keep the slots of the batch before (the capture batch, at an example's
  first step), so they write zeros into slots that live rows of this batch own, in the same launch
  (FlashInfer's ``stale_padding`` variant, vLLM #57156): stale-padding.
* ``RacyCacheStaleSlotsCounted``: the same, and ``prepare()`` also counts its calls into a buffer the graph reads
  (history in a live row, as a library's workspace keeps an earlier plan's bytes) without the race going
  through it: still stale-padding.
* ``RacyCacheSharedSlot``: padded row ``n + j`` writes into live token ``j``'s slot on every batch, fresh instance
  or not: a race that is not the padding's history, so nondeterministic-replay.
* ``RacyCacheLiveCollision``: the last two live tokens share a slot (padding harmless): a race in live rows,
  nondeterministic-replay.
* ``RacyCacheOneSlot``: every live token of a batch writes the first one's slot (padding harmless): a race in
  live rows that a one-token batch never shows, so an example meets it at a later step: nondeterministic-replay.
* ``RacyCachePaddedAlias``: a padded batch's padding rows aim at live tokens' slots (an unpadded batch's go to the
  null block): fresh padding races alike, but the same step unpadded never does: stale-padding.
"""

from __future__ import annotations

import torch

from graphsafe import CaptureSpec

from .paged_kv import PagedKV

SPEC = CaptureSpec(max_reqs=8, max_query_len=4, max_seq_len=64, block_size=16)


class RacyCache(PagedKV):
    """Safe: each live token writes its own slot; padded rows write zeros into the null block."""

    default_spec = SPEC

    def forward(self):
        flat = self.kv.view(-1, self.x.shape[1])
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


class RacyCacheStaleSlotsCounted(RacyCacheStaleSlots):
    """Buggy: stale padded slots, and a count of ``prepare()`` calls the graph reads (it adds nothing)."""

    def setup(self, spec, device):
        super().setup(spec, device)
        self.calls = torch.zeros(1, dtype=torch.int64, device=device)

    def prepare(self, batch):
        super().prepare(batch)
        self.calls += 1  # differs from a fresh instance's in row 0, whatever the batch

    def forward(self):
        super().forward()
        self.out.add_(self.calls.clamp(max=0))  # read, adds 0
        return self.out


class RacyCacheLiveCollision(RacyCache):
    """Buggy: the last live token is given the slot of the one before it (padding goes to the null block)."""

    expected = "nondeterministic-replay"

    def prepare(self, batch):
        super().prepare(batch)
        n = batch.num_tokens
        if n > 1:
            self.slots[n - 1] = self.slots[n - 2]  # BUG: two live rows, one slot


class RacyCacheOneSlot(RacyCache):
    """Buggy: every live token is given the first one's slot (padding goes to the null block)."""

    expected = "nondeterministic-replay"

    def prepare(self, batch):
        super().prepare(batch)
        n = batch.num_tokens
        self.slots[1:n] = self.slots[0]  # BUG: all live rows, one slot


class RacyCachePaddedAlias(RacyCache):
    """Buggy: in a padded batch, row ``n + j`` writes into live token ``j % n``'s slot (unpadded: the null block)."""

    expected = "stale-padding"

    def prepare(self, batch):
        super().prepare(batch)
        n, pad = batch.num_tokens, self.slots.shape[0] - batch.num_tokens
        if batch.num_slots > batch.num_reqs and n:  # BUG: the padded requests' rows get live slots
            self.slots[n:] = self.slots[torch.arange(pad, device=self.slots.device) % n]

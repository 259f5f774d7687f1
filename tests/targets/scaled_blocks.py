"""A backend whose graph reads a buffer that ``prepare()`` writes only in part, and never reads the rest.

Each KV block has a dequantisation scale (an fp8 cache's per-block scale, say), kept in the order an allocator that
hands out blocks from the pool's end would keep them (block ``b`` at row ``num_blocks - 1 - b``).  ``prepare()``
writes the scales of the blocks this batch's requests use (and of the null block that padded requests read), leaving
the others as they were: the graph reads the scale buffer as a whole (one gather), but only at the blocks the block table names.  Poison
put into the unwritten scales (the diagnosis' fresh instances are poisoned that way) never reaches a result.

* ``ScaledBlocks``: safe.
* ``ScaledRequests``: safe: a per-request scale whose padded rows keep an earlier batch's values (only padded outputs
  use them); ``ScaledRequestsPadAlias`` its buggy twin.
* ``ScaledBlocksPadAlias``: padded token rows get the first live token's cache slot, so a padded row writes its
  (zero) key and value into a live request's newest slot: stale padding, found also on an instance without history.
  The partly written scale buffer must not turn that into "live rows left unwritten".
* ``ScaledBlocksPadAliasCounted``: the same, and ``prepare()`` counts its calls into a buffer the graph reads (it
  adds nothing): a buffer whose fresh values differ from the replayed ones and change nothing.
"""

from __future__ import annotations

import torch

from graphsafe import Batch, CaptureSpec

from .hazards.paged_decode import PagedDecode


class ScaledBlocks(PagedDecode):
    """Safe: per-block scales written for the blocks in use; the others are never read."""

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.block_scale = torch.ones(spec.num_blocks, dtype=torch.float32, device=self.device)

    def write_metadata(self, batch: Batch) -> None:
        super().write_metadata(batch)
        used = sorted({0, *(b for row in batch.block_table for b in row)})  # the null block: padded requests
        idx = torch.tensor(used, dtype=torch.long)
        rows = (self.spec.num_blocks - 1 - idx).to(self.device)
        self.block_scale.index_copy_(0, rows, (1.0 + 0.125 * (idx % 3)).float().to(self.device))

    def gather_kv(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = super().gather_kv(n)
        rows = self.spec.num_blocks - 1 - self.block_table[:n].long()
        scale = self.block_scale[rows].repeat_interleave(self.bs, dim=1)[:, :, None, None]
        return k * scale, v * scale


class _PadAlias:
    def write_slots(self, batch: Batch) -> None:
        super().write_slots(batch)
        n = batch.num_tokens
        self.slot_mapping[n:].copy_(self.slot_mapping[:1].expand(self.max_tokens - n))  # BUG: padding aliases row 0


class ScaledBlocksPadAlias(_PadAlias, ScaledBlocks):
    """Buggy: padded token rows write into the first live token's slot."""


class ScaledBlocksPadAliasCounted(ScaledBlocksPadAlias):
    """Buggy (stale padding, as :class:`ScaledBlocksPadAlias`); ``self.calls[0]`` counts prepare() calls and
    ``self.calls[1]`` stays 0: the graph reads both, and they add nothing."""

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.calls = torch.zeros(2, dtype=torch.int64, device=self.device)

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.calls[0] += 1  # differs from a fresh instance's, whatever the batch

    def forward(self):
        return super().forward() + self.calls.clamp(max=0).sum()  # read, adds 0


class ScaledRequests(PagedDecode):
    """Safe: a per-request output scale written for the live requests only; padded requests' rows keep an earlier
    batch's scales, which only the padded rows' outputs (never compared, never stored) use."""

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.req_scale = torch.ones(spec.max_reqs, dtype=torch.float32, device=self.device)

    def write_metadata(self, batch: Batch) -> None:
        super().write_metadata(batch)
        n = batch.num_reqs
        vals = torch.tensor([1.0 + 0.25 * (s % 4) for s in batch.seq_lens], dtype=torch.float32)
        self.req_scale[:n].copy_(vals.to(self.device))

    def forward(self):
        out = super().forward()
        return out * self.req_scale[: self.num_slots, None]


class ScaledRequestsPadAlias(_PadAlias, ScaledRequests):
    """Buggy: padded token rows write into the first live token's slot (as :class:`ScaledBlocksPadAlias`)."""

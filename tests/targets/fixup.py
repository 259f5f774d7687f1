"""A ``prepare()`` that calls its parent's and then fixes part of what the parent wrote.

The subclass numbers the state slots its own way (the reverse of the parent's): it overwrites the state index of
every live request after the parent's ``prepare()`` wrote it.  The index is written twice in one ``prepare()``,
and the graph reads it in two launches (the gather and the scatter of the state); the graph reads the later
write's values, which are right.  Writing a buffer twice is no mistake by itself.

* ``FixupIndex``: safe; padded slots use the pad row past the pool.
* ``FixupIndexPadSlotZero``: padded slots keep state index 0, which belongs to a live request (the one holding
  the pool's last block): the state is corrupted through the padding.  Expected: stale-padding, with nothing
  said of the index's two writes.
"""

from __future__ import annotations

import torch

from .hazards.state import RecurrentDecode, RecurrentPadSlotZero


class _Fixup:
    def prepare(self, batch):
        super().prepare(batch)
        n = batch.num_reqs
        mine = [self.pool - row[0] for row in batch.block_table]  # the parent wrote row[0] - 1: reversed here
        self.state_idx[:n].copy_(torch.tensor(mine, dtype=torch.int32, device=self.device))

    def forward(self):
        n = self.num_slots
        x = self.x[:n]
        q, k, v = (torch.einsum("nhd,hde->nhe", x, self.w_qkv[i]) for i in range(3))
        k = k / (1.0 + k.norm(dim=-1, keepdim=True))
        g = torch.sigmoid(self.gate_logit)[None, :, None, None]
        s_new = g * self.state_full[self.state_idx[:n].long()] + k[:, :, :, None] * v[:, :, None, :]
        self.state_full.index_copy_(0, self.state_idx[:n].long(), s_new)  # the index read a second time
        return torch.einsum("nhd,nhde->nhe", q, s_new).reshape(n, -1)


class FixupIndex(_Fixup, RecurrentDecode):
    """Safe: the index written twice, the later write right; padding goes to the pad row."""


class FixupIndexPadSlotZero(_Fixup, RecurrentPadSlotZero):
    """Buggy: padded slots keep state index 0, a live request's slot (the one holding the pool's last block)."""

    expected = "stale-padding"

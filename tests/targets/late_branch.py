"""Two causes in one step: a Python branch frozen at capture that comes after the bug, and changes no value.

``forward()`` ends with launches only full batches take, which read the persistent state and add nothing to the
output (as a split-KV reduction that only some batches need reads the partials and gives the same values up to
rounding).  A graph captured on a full batch keeps them for every padded batch: a frozen branch, but one that
runs after every write of the persistent state.

* ``LateBranch``: safe; padded slots write the pad row past the pool.
* ``LateBranchPadSlotZero``: padded slots keep state index 0, a real request's slot (``RecurrentPadSlotZero``): the
  state differs, which the late branch cannot have caused, so the finding is stale-padding, not frozen-host-value
  (vLLM's TRITON_ATTN 0.26, whose 2D/3D choice adds ``reduce_segments`` for some batches, with padded slots left
  stale).
"""

from __future__ import annotations

from .hazards.state import RecurrentDecode, RecurrentPadSlotZero


class _LateBranch:
    def prepare(self, batch):
        super().prepare(batch)
        self.full = batch.num_reqs == batch.num_slots  # a host value the graph freezes

    def forward(self):
        out = super().forward()
        if self.full:
            out = out + 0.0 * self.state_full.amax()  # only full batches launch these; they read the state, add 0
        return out


class LateBranch(_LateBranch, RecurrentDecode):
    """Safe: the padding goes to the pad row; the late branch changes no value."""


class LateBranchPadSlotZero(_LateBranch, RecurrentPadSlotZero):
    """Buggy: padded slots keep state index 0 (stale-padding), beside the harmless late branch."""

    expected = "stale-padding"

"""Recurrent state (linear attention / SSM-style) and short-conv state in a persistent pool.

Each request owns one slot of a state pool; the pool is persistent by design and returned
from ``static()``.  A request's slot is ``first block id - 1`` (block ids are distinct, so
slots are too; the request holding block 1 owns slot 0).  Each decode step reads the
request's state, updates it with the new token and writes it back.

The safe targets send padded slots to a dedicated pad row past the pool (outside
``static()``); the buggy twins leave padded slots at index 0, a real request's slot.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import torch  # noqa: E402

import graphsafe  # noqa: E402
from graphsafe import Batch, CaptureSpec, Support, Target  # noqa: E402

from ._common import D, H, write_rows  # noqa: E402

SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=16, block_size=4)
C = H * D  # channels of the short convolution
K = 4  # conv width


class _StateTarget(Target):
    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = SPEC
    #: slot of padded requests: "pad" (a row past the pool) or 0
    pad_slot_policy = "pad"

    def setup(self, spec: CaptureSpec, device) -> None:
        self.spec, self.device = spec, torch.device(device)
        self.pool = spec.num_blocks - 1  # slots 0 .. pool-1 belong to requests
        R = spec.max_reqs
        self.x = torch.zeros(R, H, D, device=self.device)  # this step's token inputs
        self.state_idx = torch.zeros(R, dtype=torch.int32, device=self.device)
        self.seq_lens = torch.zeros(R, dtype=torch.int32, device=self.device)
        self.num_slots = R

    def pad_index(self) -> int:
        return self.pool if self.pad_slot_policy == "pad" else 0

    def prepare(self, batch: Batch) -> None:
        self.num_slots = batch.num_slots
        n = batch.num_reqs
        self.x[:n].copy_(graphsafe.seeded((n, H, D), seed=graphsafe.derive_seed(batch.seed, "x"), device=self.device))
        self.x[n:].zero_()
        write_rows(self.state_idx, [row[0] - 1 for row in batch.block_table], self.pad_index())
        write_rows(self.seq_lens, list(batch.seq_lens), 0)


class RecurrentDecode(_StateTarget):
    """Safe: gated linear-attention recurrence ``S = g * S + k v^T``, ``o = q S``.

    ``forward`` gathers the slots, updates, and writes back with ``index_copy_``; padded
    slots read and write the pad row.
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.state_full = torch.zeros(self.pool + 1, H, D, D, device=self.device)
        self.state = self.state_full[: self.pool]
        self.w_qkv = torch.zeros(3, H, D, D, device=self.device)  # per-head projections
        self.gate_logit = torch.zeros(H, device=self.device)

    def static(self):
        return {"state": self.state, "w_qkv": self.w_qkv, "gate_logit": self.gate_logit}

    def forward(self):
        n = self.num_slots
        x = self.x[:n]
        q, k, v = (torch.einsum("nhd,hde->nhe", x, self.w_qkv[i]) for i in range(3))
        k = k / (1.0 + k.norm(dim=-1, keepdim=True))
        idx = self.state_idx[:n].long()
        g = torch.sigmoid(self.gate_logit)[None, :, None, None]
        s_new = g * self.state_full[idx] + k[:, :, :, None] * v[:, :, None, :]
        self.state_full.index_copy_(0, idx, s_new)
        return torch.einsum("nhd,nhde->nhe", q, s_new).reshape(n, C)


class RecurrentPadSlotZero(RecurrentDecode):
    """Buggy (pad slot aliasing live state): padded slots keep state index 0.

    How it happens: the builder fills ``state_idx`` for live requests and leaves padded
    entries at 0 (the ``torch.zeros`` default), which is a real request's slot in the pool.
    The captured update runs on every slot of the graph: padded rows decay slot 0's state
    and write it back, over a live request's update or an idle request's state (SGLang
    #36885, #38997; TensorRT-LLM #13151).  Expected: stale-padding.
    """

    pad_slot_policy = "zero"


class ConvDecode(_StateTarget):
    """Safe: causal short convolution (Mamba-style ``conv1d`` decode) with a rolling state.

    ``window = [state (K-1 inputs), x]``, ``y = sum(window * w)``; the state moves by one.
    A request whose ``seq_len`` is 1 starts from zeros (``torch.where``); the state is
    updated with ``index_add_`` of the difference.  Padded slots use the pad row.
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.conv_full = torch.zeros(self.pool + 1, C, K - 1, device=self.device)
        self.conv_state = self.conv_full[: self.pool]
        self.conv_w = torch.zeros(C, K, device=self.device)

    def static(self):
        return {"conv_state": self.conv_state, "conv_w": self.conv_w}

    def forward(self):
        n = self.num_slots
        idx = self.state_idx[:n].long()
        old = self.conv_full[idx]  # [n, C, K-1]
        fresh = (self.seq_lens[:n] == 1)[:, None, None]
        prev = torch.where(fresh, torch.zeros_like(old), old)
        window = torch.cat([prev, self.x[:n].reshape(n, C, 1)], dim=2)  # [n, C, K]
        y = (window * self.conv_w[None]).sum(-1)
        self.conv_full.index_add_(0, idx, window[:, :, 1:] - old)
        return torch.nn.functional.silu(y)


class ConvPadSlotZero(ConvDecode):
    """Buggy (pad slot aliasing live state): padded slots keep conv-state index 0.

    How it happens: as in ``RecurrentPadSlotZero``; here the state update is
    ``torch.where`` (fresh sequences) plus ``index_add_``, so a padded row *adds* its shift
    of slot 0 to slot 0, on top of a live request's update when that request owns slot 0
    (SGLang #30974).  Expected: stale-padding.
    """

    pad_slot_policy = "zero"

"""A target whose replay never ends: a kernel spins until a host value it froze at capture matches the
batch, which it never does again (a stand-in for FlashInfer kernels that run away on stale plan data).
Eagerly the value is this batch's own and the kernel returns at once."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import graphsafe
from graphsafe import Batch, CaptureSpec, Support

SPEC = CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, block_size=4)


@triton.jit
def _spin_until(lens_ptr, out_ptr, total, N: tl.constexpr):
    """out[0] = how long it waited for sum(lens) == total: forever when ``total`` is stale."""
    offs = tl.arange(0, N)
    s = tl.sum(tl.load(lens_ptr + offs))
    waited = 0
    while s != total:
        waited += 1
        s = tl.sum(tl.load(lens_ptr + offs))
    tl.store(out_ptr + offs, tl.load(lens_ptr + offs).to(tl.float32) + waited)


class HangsInReplay(graphsafe.Target):
    """Replays run a kernel that never ends: its ``total`` is the capture batch's."""

    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        self.lens = torch.zeros(spec.max_reqs, dtype=torch.int32, device=device)
        self.out = torch.zeros(spec.max_reqs, device=device)

    def prepare(self, batch: Batch) -> None:
        self.lens.zero_()
        self.lens[: batch.num_reqs].copy_(torch.tensor(batch.seq_lens, dtype=torch.int32))
        self.total = sum(batch.seq_lens)  # BUG: a host value the graph freezes

    def forward(self) -> torch.Tensor:
        _spin_until[(1,)](self.lens, self.out, self.total, N=self.lens.numel())
        return self.out


@triton.jit
def _spin_past(lens_ptr, out_ptr, total, N: tl.constexpr):
    """out = lens + (total - sum(lens)); spins for ever while sum(lens) > ``total``."""
    offs = tl.arange(0, N)
    s = tl.sum(tl.load(lens_ptr + offs))
    waited = 0
    while s > total:
        waited += 1
        s = tl.sum(tl.load(lens_ptr + offs))
    tl.store(out_ptr + offs, tl.load(lens_ptr + offs).to(tl.float32) + (total - s) + waited)


class HangsInALaterPhase(HangsInReplay):
    """The same frozen ``total``, read two ways: under the worst-case capture (the first phase) a replay ends and
    gives wrong rows (``frozen-host-value``); under the minimal capture a later phase's replay of a longer batch
    never ends."""

    def forward(self) -> torch.Tensor:
        _spin_past[(1,)](self.lens, self.out, self.total, N=self.lens.numel())
        return self.out

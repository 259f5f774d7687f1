"""Targets whose kernel graphsafe sees only as a call (:func:`graphsafe.opaque_call`), as FlashInfer's
TVM-FFI kernels: each unsafe variant makes one mistake that only the declared call's record can name.

The "extension kernel" is plain torch (so the targets run on both engines), called through
``opaque_call``: the recorder sees the call's arguments, not the ops inside it.
"""

from __future__ import annotations

import torch

import graphsafe
from graphsafe import Batch, CaptureSpec, Support

SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=16, block_size=4)
D = 4


def ext_scale(x: torch.Tensor, lens: torch.Tensor, out: torch.Tensor, factor: float) -> None:
    """The extension kernel: ``out = x * lens * factor`` per row."""
    torch.mul(x, lens[:, None] * factor, out=out)


class OpaqueSafe(graphsafe.Target):
    """Safe: persistent buffers written in place; the host factor is a constant."""

    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = SPEC
    expected = None

    def setup(self, spec: CaptureSpec, device) -> None:
        self.x = torch.zeros(spec.max_reqs, D, device=device)
        self.lens = torch.zeros(spec.max_reqs, device=device)
        self.out = torch.zeros(spec.max_reqs, D, device=device)
        self.factor = 0.5

    def prepare(self, batch: Batch) -> None:
        n = batch.num_reqs
        self.x[:n].copy_(graphsafe.seeded((n, D), seed=batch.seed, device=self.x.device))
        self.x[n:] = 0
        self.lens[:n].copy_(torch.tensor([float(s) for s in batch.seq_lens]))
        self.lens[n:] = 0

    def forward(self) -> torch.Tensor:
        graphsafe.opaque_call(
            "ext.scale", ext_scale, self.x, self.lens, self.out, self.factor, arg_names=("x", "lens", "out", "factor")
        )
        return self.out


class OpaqueFreshLens(OpaqueSafe):
    """prepare() rebinds the lengths buffer only the opaque call reads: the graph reads freed memory."""

    expected = "stale-pointer"

    def prepare(self, batch: Batch) -> None:
        self.lens = torch.zeros_like(self.lens)
        super().prepare(batch)


class OpaqueFrozenFactor(OpaqueSafe):
    """A host value passed to the opaque call comes from the batch: the capture froze the capture batch's."""

    expected = "frozen-host-value"

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.factor = float(batch.max_seq_len)

"""A batch-derived Python int in a slice (a frozen host value): ``forward()`` averages the live rows by slicing
``x[: self.n]`` with ``n`` set in ``prepare()`` from the batch.  The capture keeps the capture batch's ``n``; the
first kernel whose work it changes is the mean's reduction, but the value enters at the slice."""

from __future__ import annotations

import torch

import graphsafe
from graphsafe import Batch, CaptureSpec, Support


class SliceByBatchInt(graphsafe.Target):
    support = Support.ALWAYS
    default_spec = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=64, block_size=16)
    expected = "frozen-host-value"

    def setup(self, spec: CaptureSpec, device) -> None:
        t = spec.max_reqs * spec.max_query_len
        self.x = torch.zeros(t, 8, device=device)
        self.out = torch.zeros(t, 8, device=device)
        self.n = t

    def prepare(self, batch: Batch) -> None:
        n = batch.num_tokens
        self.x[:n] = graphsafe.seeded((n, 8), seed=batch.seed, device=self.x.device)
        self.x[n:] = 0
        self.n = n  # BUG: a host int from the batch, read in forward()

    def forward(self):
        live = self.x[: self.n]  # the frozen value enters here
        torch.mul(self.x, live.mean(dim=0), out=self.out)
        return self.out

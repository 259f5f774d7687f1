"""Plain-torch targets (no Triton kernel) for the command-line, plugin and report tests.

``Safe`` copies each step's inputs into buffers allocated once in ``setup()``;
``Fresh`` (and ``Fresh2``) rebind a buffer the graph reads every step (stale-pointer);
``WrongType`` and ``NoForward`` break the contract.  Tests
that run graphsafe in a fresh process write :data:`SOURCE` (this file) into
their temporary directory as a module of its own, so the child imports it
without the repository on its path.
"""

from __future__ import annotations

from pathlib import Path

import torch

import graphsafe


class Safe(graphsafe.Target):
    """A correct target: persistent buffers, everything rewritten in prepare()."""

    support = graphsafe.Support.ALWAYS
    default_spec = graphsafe.CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, block_size=4)

    def setup(self, spec, device):
        self.x = torch.zeros(spec.max_reqs * spec.max_query_len, 4, device=device)
        self.lens = torch.zeros(spec.max_reqs * spec.max_query_len, device=device)
        self.out = torch.zeros_like(self.x)

    def prepare(self, batch):
        n = batch.num_tokens
        self.x.zero_()
        self.x[:n] = graphsafe.seeded((n, 4), seed=batch.seed)
        lens = torch.tensor([float(s) for s, q in zip(batch.seq_lens, batch.query_lens) for _ in range(q)])
        self.lens.zero_()
        self.lens[:n] = lens

    def forward(self):
        torch.mul(self.x, self.lens[:, None], out=self.out)
        return self.out


class Fresh(Safe):
    """stale-pointer: a new tensor every step, the captured one dropped."""

    expected = "stale-pointer"

    def prepare(self, batch):
        super().prepare(batch)
        self.lens = self.lens.clone()


class Fresh2(Fresh):
    """The same stale pointer in a second target (two targets for two workers)."""


class WrongType(Safe):
    """forward() returns an int."""

    def forward(self):
        super().forward()
        return 3


class NoForward:
    """Not a Target, and no forward()."""

    support = graphsafe.Support.ALWAYS

    def setup(self, spec, device):
        pass

    def prepare(self, batch):
        pass


SOURCE = Path(__file__).read_text()

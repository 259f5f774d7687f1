"""Targets safe exactly up to each support level, and one safe only under one capture policy.

They share ``plain_torch.Safe``'s backend (``out = x * seq_len``, per token) and change one thing
each; the audit must name each one's highest safe level.
"""

from __future__ import annotations

import torch

import graphsafe
from tests.targets.plain_torch import Safe

SPEC = graphsafe.CaptureSpec(max_reqs=4, max_query_len=4, max_seq_len=8, block_size=4)


class Levelled(Safe):
    default_spec = SPEC


class SafeUpToDecode(Levelled):
    """Only single-token decode is safe: the capture's query length is a host scalar frozen into the graph."""

    support = graphsafe.Support.UNIFORM_SINGLE_TOKEN_DECODE

    def prepare(self, batch):
        super().prepare(batch)
        self.q = float(batch.max_query_len)

    def forward(self):
        torch.mul(self.x, self.lens[:, None] * self.q, out=self.out)
        return self.out


class SafeUpToUniform(Levelled):
    """Uniform batches are safe, mixed ones are not: a host branch on ``batch.is_uniform`` picks how a
    token finds its request (``token // q`` on the device, right for uniform batches; a per-token table
    otherwise).  Every capture batch is uniform, so the graph keeps the uniform path for mixed batches."""

    support = graphsafe.Support.UNIFORM_BATCH

    def setup(self, spec, device):
        super().setup(spec, device)
        slots = spec.max_reqs * spec.max_query_len
        self.req_lens = torch.zeros(spec.max_reqs, device=device)
        self.token_req = torch.zeros(slots, dtype=torch.int64, device=device)
        self.q0 = torch.ones(1, dtype=torch.int64, device=device)
        self.rows = torch.arange(slots, device=device)

    def prepare(self, batch):
        super().prepare(batch)
        self.req_lens.zero_()
        self.req_lens[: batch.num_reqs] = torch.tensor([float(s) for s in batch.seq_lens])
        owners = [r for r, q in enumerate(batch.query_lens) for _ in range(q)]
        self.token_req.zero_()
        self.token_req[: len(owners)] = torch.tensor(owners)
        self.q0.fill_(batch.query_lens[0])
        self.uniform = batch.is_uniform  # a host value: the branch below is frozen at capture

    def forward(self):
        if self.uniform:
            req = torch.clamp(torch.div(self.rows, self.q0, rounding_mode="floor"), max=self.req_lens.shape[0] - 1)
        else:
            req = self.token_req
        live = (self.lens > 0).to(self.x.dtype)
        torch.mul(self.x, (self.req_lens[req] * live)[:, None], out=self.out)
        return self.out


class SafeAlways(Levelled):
    """Safe for every batch kind."""

    support = graphsafe.Support.ALWAYS


class SafeOnlyUnderWorstCase(Levelled):
    """Safe when captured with worst-case batches, broken under a minimal capture: the capture's longest
    sequence clamps every replay's lengths (a no-op only when the capture had the longest possible)."""

    support = graphsafe.Support.ALWAYS

    def prepare(self, batch):
        super().prepare(batch)
        self.cap = float(max(batch.seq_lens))

    def forward(self):
        torch.mul(self.x, self.lens[:, None].clamp(max=self.cap), out=self.out)
        return self.out


class DecodeOnlyRows(Levelled):
    """Declares single-token decode and writes one output row per request (as a decode-only kernel
    may); with longer queries the output has fewer rows than the batch has tokens, so batches above
    its level break the contract (``live()``'s rows), not the graph."""

    support = graphsafe.Support.UNIFORM_SINGLE_TOKEN_DECODE

    def setup(self, spec, device):
        super().setup(spec, device)
        self.req_out = torch.zeros(spec.max_reqs, 4, device=device)

    def forward(self):
        n = self.req_out.shape[0]
        torch.mul(self.x[:n], self.lens[:n, None], out=self.req_out)
        return self.req_out

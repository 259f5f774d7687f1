"""Diagnosis of a difference no probe explains: the replay-mismatch says what was ruled out."""

from __future__ import annotations

import random

import torch

import graphsafe
from graphsafe import CaptureSpec, Support
from graphsafe.diagnosis import at_stage


class RandomHostScale(graphsafe.Target):
    """Scales by a host value drawn at random on every forward(): no buffer, no argument the batch sets
    and no branch explains why graph and eager differ."""

    support = Support.ALWAYS
    default_spec = CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, block_size=4)

    def setup(self, spec, device):
        rows = spec.max_reqs * spec.max_query_len
        self.x = torch.zeros(rows, 4, device=device)
        self.out = torch.zeros(rows, 4, device=device)

    def prepare(self, batch):
        n = batch.num_tokens
        self.x[:n] = graphsafe.seeded((n, 4), seed=batch.seed, device=self.x.device)
        self.x[n:] = 0

    def forward(self):
        torch.mul(self.x, 1.0 + random.random(), out=self.out)
        return self.out


def test_an_unexplained_difference_says_what_each_probe_ruled_out():
    result = graphsafe.check(RandomHostScale, engine="emulate", examples=2, database=False, seed=0)
    [f] = result.errors
    assert f.kind.value == "replay-mismatch"
    assert "ruled out:" in f.message
    looked = f.details["ruled_out"]
    for probe in ("stale-pointer", "nondeterministic-replay", *(p.name for p in at_stage("diagnosis"))):
        assert any(line.startswith(probe + ":") for line in looked), (probe, looked)
    assert any("an eager run of the capture batch differs too" in line for line in looked), looked


class AccumulatorZeroedInPrepare(graphsafe.Target):
    """The graph fills a workspace, then adds it into an accumulator that only prepare() zeroes."""

    support = Support.ALWAYS
    default_spec = CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, block_size=4)

    def setup(self, spec, device):
        rows = spec.max_reqs * spec.max_query_len
        self.x = torch.zeros(rows, 4, device=device)
        self.ws = torch.zeros(rows, 4, device=device)
        self.acc = torch.zeros(rows, 4, device=device)

    def prepare(self, batch):
        n = batch.num_tokens
        self.x[:n] = graphsafe.seeded((n, 4), seed=batch.seed, device=self.x.device)
        self.x[n:] = 0
        self.acc.zero_()

    def forward(self):
        torch.mul(self.x, 2.0, out=self.ws)  # written before it is read: carries nothing
        self.acc.add_(self.ws)
        return self.acc * 1.0


def test_two_replays_that_differ_name_the_buffer_a_replay_carries_into_the_next():
    result = graphsafe.check(AccumulatorZeroedInPrepare, engine="emulate", examples=2, database=False, seed=0)
    [f] = result.errors
    assert f.kind.value == "nondeterministic-replay"
    assert (f.where, f.cause, f.details["carried"]) == ("self.acc", "buffer:self.acc", ["self.acc"])

"""An accumulator the graph reads before writing, which nothing resets, is named (``unpersisted-metadata``, its
carried shape) on the emulator too, where recorded launches read it; a work counter that the graph reads first but
hands back as it found it (zeroed after the kernel) is no cause beside it."""

from __future__ import annotations

import torch

import graphsafe
from graphsafe.diagnosis.probes import unpersisted_metadata
from tests.targets.hazards._common import D, H
from tests.targets.hazards.accumulate import TileCounterResetAfter


class CounterHandedBackAccumulates(TileCounterResetAfter):
    """The safe handed-back counter, and a bug beside it: the graph adds each step's output into ``self.acc``,
    which nothing resets, and returns that."""

    def setup(self, spec, device) -> None:
        super().setup(spec, device)
        self.acc = torch.zeros(self.out.shape[0], H * D, device=self.device)

    def forward(self):
        out = super().forward()
        n = out.shape[0]
        self.acc[:n] += out
        return self.acc[:n].clone()


def check(cls):
    return graphsafe.check(cls, engine="emulate", examples=4, seed=0, database=False, capture="worst", isolate="none")


def test_the_accumulator_is_named_and_the_counter_handed_back_is_not(no_shrinking):
    [f] = check(CounterHandedBackAccumulates).errors
    assert f.kind.value == "unpersisted-metadata" and f.where == "self.acc", f.summary()
    assert "self.counter" not in f.message, f.message


def test_without_the_hand_back_experiment_the_counter_would_be_named_too(no_shrinking, monkeypatch):
    carried_inputs = unpersisted_metadata.carried_inputs
    monkeypatch.setattr(  # every buffer read before written, whatever the replay from zeros leaves it
        unpersisted_metadata, "carried_inputs", lambda ctx, keys, accumulating=False: carried_inputs(ctx, keys)
    )
    [f] = check(CounterHandedBackAccumulates).errors
    assert "self.counter" in f.message, f.message

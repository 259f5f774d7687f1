"""The carried-buffer experiment (replay over a zeroed and a filled buffer) on a graph that races: a race quiet in
the first pair of replays and loud in the filled one is no buffer carried from one replay into the next (the fill's
effect must repeat); an accumulator the graph adds into is still named."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from graphsafe.diagnosis.carried import carried_inputs


class Graph:
    """The recording carried_inputs remembers its answers on (weakly)."""


class Instance:
    def __init__(self):
        self.acc = torch.zeros(4)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int32), b.view(torch.int32))  # NaN bytes equal NaN bytes, as bitwise=True has it


def ctx_for(replay) -> SimpleNamespace:
    target = Instance()
    comparator = SimpleNamespace(
        paged=lambda t: False,
        outputs=lambda a, b, batch, bitwise: [] if all(map(bitwise_equal, a, b)) else ["differs"],
    )
    ctx = SimpleNamespace(
        unreplayable=False,
        graph=SimpleNamespace(recording=Graph()),
        session=SimpleNamespace(target=target, static_keys=set()),
        seed=0,
        region=None,
        comparator=comparator,
        batch=None,
    )
    ctx.replay_live = lambda: replay(target)
    return ctx, target.acc.untyped_storage().data_ptr()


def test_a_race_quiet_in_the_first_pair_does_not_make_a_written_buffer_carried():
    # outputs never read the buffer; the third replay (the filled one) happens to land the race the other way
    outcomes = iter([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])

    def racy(target):
        return [torch.full((2,), next(outcomes))]

    ctx, key = ctx_for(racy)
    assert carried_inputs(ctx, [key]) == []


def test_an_accumulator_the_graph_adds_into_is_carried():
    def accumulate(target):
        target.acc += 1.0  # read before written, and nothing resets it
        return [target.acc.clone()]

    ctx, key = ctx_for(accumulate)
    assert carried_inputs(ctx, [key]) == [key]

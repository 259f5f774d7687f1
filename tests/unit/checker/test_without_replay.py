"""Which probes run for a step whose replay faults or never ends: those the registry marks ``without_replay``, and
nothing there may replay the graph."""

from __future__ import annotations

import pytest

from graphsafe.diagnosis.context import StepContext
from graphsafe.diagnosis.unreplayable import WITHOUT_REPLAY
from graphsafe.errors import InternalError
from graphsafe.findings import KINDS


def test_the_probes_without_a_replay_are_the_ones_the_registry_marks():
    marked = {k.value for k, info in KINDS.items() if info.without_replay}
    assert {p.name for stage in WITHOUT_REPLAY.values() for p in stage} == marked
    assert marked == {"stale-pointer", "lazy-init", "unpersisted-metadata", "frozen-host-value"}


def test_probes_that_replay_are_not_marked():
    for kind in ("nondeterministic-replay", "output-not-written", "stale-padding"):
        assert not next(info for k, info in KINDS.items() if k.value == kind).without_replay


def test_the_carried_buffer_experiment_names_nothing_on_a_step_that_cannot_replay():
    from types import SimpleNamespace

    from graphsafe.diagnosis.carried import carried_inputs

    # unpersisted-metadata runs there: its carried-buffer shape needs replays, and answers nothing instead
    assert carried_inputs(SimpleNamespace(unreplayable=True), [1, 2]) == []


def test_replaying_an_unreplayable_step_is_a_graphsafe_bug():
    ctx = StepContext.__new__(StepContext)
    ctx.unreplayable = True
    with pytest.raises(InternalError, match="only probes registered without_replay"):
        ctx.replay_live()

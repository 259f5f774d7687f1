"""Two replays of one prepared batch that differ are a symptom while a search shrinks: the race experiments (fresh
eager runs, fresh padding, carried buffers) run where the runner first meets the symptom and on the example that
is left, not on every shrinking step.  A racing example whose race was explained as a cause reported already ends
there; its difference from eager is no evidence of another cause."""

from __future__ import annotations

import pytest
import torch

import graphsafe
from graphsafe.checker.api import prepared
from graphsafe.checker.options import CheckOptions
from graphsafe.checker.plans import Plan
from graphsafe.checker.steps import Symptom
from graphsafe.diagnosis.probes import nondeterministic_replay
from tests.integration.test_padding_race import CAPTURE, STEP
from tests.targets.races import RacyCacheLiveCollision, RacyCacheSharedSlot, RacyCacheStaleSlots

PLAN = Plan((STEP,), CAPTURE, 8)


@pytest.fixture
def race_calls(monkeypatch) -> list[int]:
    """How many times the race experiment ran (the probe's explanation of two replays that differ)."""
    calls: list[int] = []
    real = nondeterministic_replay.race

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(nondeterministic_replay, "race", counted)
    return calls


def runner():
    torch.manual_seed(0)  # the scatter's order: with 16 slots written twice, two replays differ anyway
    return prepared(RacyCacheStaleSlots, CheckOptions(engine="emulate")).runner(None)


def test_a_shrinking_run_explains_racing_replays_where_it_first_meets_them(race_calls):
    r = runner()
    got = r.run(PLAN, diagnose=False)
    assert isinstance(got, Symptom) and got.of == "replays"
    assert len(race_calls) == 1
    first = r.first_diagnoses[got.key]
    assert first is not None and first.kind.value == "stale-padding"


def test_a_shrinking_run_meeting_the_same_race_again_returns_its_symptom_unexplained(race_calls):
    r = runner()
    r.run(PLAN, diagnose=False)
    again = r.run(PLAN, diagnose=False)
    assert isinstance(again, Symptom) and again.of == "replays"
    assert len(race_calls) == 1


def test_the_example_left_after_shrinking_is_explained_again(race_calls):
    r = runner()
    r.run(PLAN, diagnose=False)
    final = r.run(PLAN)
    assert final is not None and final.kind.value == "stale-padding"
    assert len(race_calls) == 2
    assert r.diagnosed is final and r.symptom is not None and r.symptom.of == "replays"


def test_a_dismissed_race_ends_its_example_without_a_comparison_with_eager(race_calls):
    r = runner()
    got = r.run(PLAN, diagnose=False)
    r.dismiss_symptom(got)
    assert r.run(PLAN, diagnose=False) is None
    assert r.run(PLAN) is None
    assert len(race_calls) == 1


def test_a_dismissed_race_leaves_differences_from_eager_in_that_tensor_diagnosable():
    r = runner()
    got = r.run(PLAN, diagnose=False)
    r.dismiss_symptom(got)
    assert not r._dismissed(list(got.mismatches))


@pytest.mark.parametrize("target", [RacyCacheSharedSlot, RacyCacheLiveCollision])
def test_a_check_of_a_racing_target_runs_the_race_experiment_at_most_twice_a_phase(race_calls, target):
    torch.manual_seed(0)
    r = graphsafe.check(target, engine="emulate", examples=30, seed=0, database=False)
    assert r.kinds == {"nondeterministic-replay"}, r.summary()
    phases = len(CheckOptions(engine="emulate").policies_for(target))
    assert len(race_calls) <= 2 * phases < r.calls

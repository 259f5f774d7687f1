"""A frozen host value is named by re-capture when the eager control cannot serve (a planner that runs in warm-up
and not in the capture): the capture of the failing batch replays right and differs in that value alone."""

from __future__ import annotations

import graphsafe
from tests.targets import lazy_plan_scale as T


def check(cls):
    return graphsafe.check(cls, engine="emulate", examples=15, seed=0, database=False, capture="explore")


def test_a_lazily_planned_backend_is_safe():
    result = check(T.LazyPlan)
    assert result.ok and not result.findings, result.summary()


def test_a_host_scale_beside_a_lazy_planner_is_a_frozen_host_value_named_by_recapture():
    result = check(T.LazyPlanHostScale)
    assert result.kinds == {"frozen-host-value"}, result.summary()
    f = result.errors[0]
    assert f.where == "aten::mul_.other", result.summary()
    assert f.details["seen_in"] == "recapture"

"""A check's capture phases share what they found: a later phase does not find and shrink again a cause an
earlier phase reported (it runs its own examples, searching for other causes)."""

from __future__ import annotations

import collections

from graphsafe.capture.policies import resolve_capture
from graphsafe.checker.api import run_check
from graphsafe.checker.options import CheckOptions
from graphsafe.checker.plans import phases
from tests.targets import synthetic as S


def calls_per_phase(cls, **options):
    calls: collections.Counter = collections.Counter()
    result = run_check(
        cls,
        CheckOptions(engine="emulate", seed=0, database=False, **options),
        progress=lambda p: calls.update([p.phase] if p.stage != "diagnosing" else []),  # examples only
    )
    return result, calls


def test_a_later_phase_runs_only_its_examples_when_it_meets_a_reported_cause_again():
    alone, alone_calls = calls_per_phase(S.HostScale, capture="minimal", examples=5)
    assert alone.kinds == {"frozen-host-value"} and alone_calls["minimal"] > 5, "on its own it finds and shrinks it"
    result, calls = calls_per_phase(S.HostScale, examples=20)  # worst first; minimal gets 5 examples
    budget = {ph.policy.name: ph.examples for ph in phases(resolve_capture("explore"), 20)}
    assert budget["minimal"] == 5
    assert {name: calls[name] for name in ("ascending", "minimal", "drawn")} == {
        name: budget[name] for name in ("ascending", "minimal", "drawn")
    }
    [finding] = result.errors
    assert finding.kind.value == "frozen-host-value" and finding.details["capture_policy"] == "worst"

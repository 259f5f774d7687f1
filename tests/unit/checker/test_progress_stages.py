"""Specifications for a check's progress (``run_check(..., progress=)``): called after every example with
the stage of the phase's search, ``searching`` until an example of the phase fails and ``shrinking`` after,
and before each diagnosis (which re-runs the target) with ``diagnosing``."""

from __future__ import annotations

from graphsafe.checker.api import Progress, run_check
from graphsafe.checker.options import CheckOptions
from tests.targets import synthetic as S


def test_progress_names_searching_then_diagnosing_then_shrinking():
    seen: list[Progress] = []
    options = CheckOptions(engine="emulate", seed=0, database=False, capture="minimal", examples=5)
    result = run_check(S.HostScale, options, progress=seen.append)
    assert result.kinds == {"frozen-host-value"}
    stages = [p.stage for p in seen]
    assert stages[0] == "searching"
    assert "diagnosing" in stages and "shrinking" in stages
    assert stages.index("diagnosing") < stages.index("shrinking")  # the failing example was diagnosed first
    assert sum(s != "diagnosing" for s in stages) == result.calls  # after every example, once
    assert all(p.phase == "minimal" for p in seen)


def test_progress_names_diagnosing_before_two_racing_replays_are_explained():
    import torch

    from tests.targets.races import RacyCacheSharedSlot

    seen: list[Progress] = []
    torch.manual_seed(0)
    options = CheckOptions(engine="emulate", seed=0, database=False, capture="worst", examples=10)
    result = run_check(RacyCacheSharedSlot, options, progress=seen.append)
    assert result.kinds == {"nondeterministic-replay"}
    stages = [p.stage for p in seen]
    assert "diagnosing" in stages
    assert stages.index("diagnosing") < stages.index("shrinking")

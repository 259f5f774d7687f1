"""Scheduling by cost in a real pytest-xdist run (graphsafe/frontend/schedule.py): a target recorded as
slow that passes runs as one item per part, on different workers, and its parts' durations are recorded
under the target."""

from __future__ import annotations

import json

import pytest

from tests.subprocesses import OUTER_RUN_VARS, plugin_args
from tests.targets.plain_torch import SOURCE

FAST = ["-p", "no:randomly", "--graphsafe-engine", "emulate", "--graphsafe-examples", "4", "--graphsafe-steps", "2"]
FAST += ["--graphsafe-probes", "stale-pointer", "--graphsafe-capture-sizes", "2"]


@pytest.fixture
def gs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for var in OUTER_RUN_VARS:
        monkeypatch.delenv(var, raising=False)
    pytester.makepyfile(mymod=SOURCE)
    durations = pytester.path / ".pytest_cache" / "v" / "graphsafe" / "durations"
    durations.parent.mkdir(parents=True)
    durations.write_text(json.dumps({"emulate": {"mymod:Safe": 100.0, "mymod:Fresh": 1.0}}))
    return pytester


def test_a_slow_target_that_passes_is_split_over_the_workers_and_recorded_whole(gs):
    result = gs.runpytest_subprocess(
        *plugin_args(), *FAST, "-n", "2", "-v", "--graphsafe", "mymod:Safe", "--graphsafe", "mymod:Fresh", timeout=300
    )
    result.assert_outcomes(passed=2, failed=1)
    ran = {line.split()[-1]: line.split()[0] for line in result.outlines if "PASSED graphsafe[mymod:Safe#" in line}
    assert sorted(ran) == ["graphsafe[mymod:Safe#1/2]", "graphsafe[mymod:Safe#2/2]"], result.stdout.str()
    assert sorted(ran.values()) == ["[gw0]", "[gw1]"]  # one part on each worker
    recorded = json.loads((gs.path / ".pytest_cache" / "v" / "graphsafe" / "durations").read_text())
    assert sorted(recorded["emulate"]) == ["mymod:Fresh", "mymod:Safe"]  # the parts add up under the target

"""The pytest plugin in pytest-xdist's controller (graphsafe/frontend/plugin.py): it runs no item, so it
spawns its workers before importing torch, then resolves the options and prints the header.

Fresh pytest processes through ``pytester``, on the emulator with synthetic torch-only targets.
"""

from __future__ import annotations

import json

import pytest

from tests.subprocesses import OUTER_RUN_VARS, plugin_args
from tests.targets.plain_torch import SOURCE

FAST = ["-p", "no:cacheprovider", "-p", "no:randomly", "--graphsafe-engine", "emulate", "--graphsafe-examples", "2"]
FAST += ["--graphsafe-steps", "2", "--graphsafe-probes", "stale-pointer", "--graphsafe-capture-sizes", "1"]

#: records, in the controller, what it had imported once its workers were spawned (by xdist's
#: pytest_sessionstart): first in pytest_runtestloop (tryfirst, registered after graphsafe's plugin)
CONTROLLER_CONFTEST = """
import json
import sys

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    if hasattr(session.config, "workerinput"):
        return
    facts = {
        "controller": session.config.pluginmanager.has_plugin("dsession"),
        "spawned": bool(getattr(session.config.pluginmanager.get_plugin("dsession"), "nodemanager", None)),
        "imported": sorted(m for m in ("torch", "triton", "graphsafe.frontend.items") if m in sys.modules),
    }
    with open("controller.json", "w") as f:
        json.dump(facts, f)
"""


@pytest.fixture
def gs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for var in OUTER_RUN_VARS:
        monkeypatch.delenv(var, raising=False)
    pytester.makepyfile(mymod=SOURCE)
    pytester.makeconftest(CONTROLLER_CONFTEST)
    return pytester


def run(gs: pytest.Pytester, *args: str) -> pytest.RunResult:
    return gs.runpytest_subprocess(*plugin_args(), *FAST, *args, timeout=300)


def test_the_controller_spawns_its_workers_before_importing_torch(gs):
    result = run(gs, "-n", "2", "--graphsafe", "mymod:Safe", "--graphsafe", "mymod:Fresh")
    result.assert_outcomes(passed=1, failed=1)
    facts = json.loads((gs.path / "controller.json").read_text())
    assert facts == {"controller": True, "spawned": True, "imported": []}


def test_the_controller_prints_the_header_once_its_workers_are_spawned(gs):
    result = run(gs, "-n", "2", "--graphsafe", "mymod:Safe")
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    header = [i for i, line in enumerate(lines) if line.startswith("graphsafe: 1 target(s), engine emulate")]
    created = [i for i, line in enumerate(lines) if line.startswith("created: 2/2 workers")]
    assert len(header) == 1 and len(created) == 1 and created[0] < header[0], result.stdout.str()


def test_without_xdist_the_process_imports_torch_before_the_session_and_prints_the_header_first(gs):
    result = run(gs, "-p", "no:xdist", "--graphsafe", "mymod:Safe")
    result.assert_outcomes(passed=1)
    facts = json.loads((gs.path / "controller.json").read_text())
    assert facts["controller"] is False and "torch" in facts["imported"]
    out = result.stdout.str()
    assert out.index("graphsafe: 1 target(s), engine emulate") < out.index("collected 1 item")


def test_a_bad_option_under_xdist_exits_4_with_one_graphsafe_line_and_no_worker_traceback(gs):
    result = run(gs, "-n", "2", "--graphsafe", "mymod:Safe", "--graphsafe-timeout", "soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if "graphsafe:" in line]
    assert errors == ["ERROR: graphsafe: --graphsafe-timeout: expected a number of seconds, got 'soon'"], (
        result.stderr.str()
    )
    both = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in both and "[gw" not in both and "INTERNALERROR" not in both, both

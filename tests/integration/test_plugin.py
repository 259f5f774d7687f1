"""The pytest plugin (graphsafe/frontend/plugin.py), run in fresh pytest processes through ``pytester``.

Synthetic, torch-only targets on the emulator keep every run to seconds:
``Safe`` has no hazard, ``Fresh`` rebinds a buffer the graph reads (stale-pointer).
Runs that need a real process (xdist, Hypothesis' CI profile) use
``runpytest_subprocess``; collection-only and contract-error runs stay in-process.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest

from graphsafe import UsageError
from graphsafe.checker import names
from graphsafe.diagnosis import PROBES
from graphsafe.frontend import devices, schedule
from graphsafe.frontend import options as frontend
from graphsafe.frontend.items import gpu_sharing_hint
from tests.subprocesses import OUTER_RUN_VARS, error_sections, failure_sections, plugin_args
from tests.targets.plain_torch import SOURCE

TARGETS = (
    SOURCE
    + '''
import hypothesis


SEEN_PROFILES = set()


class RecordsProfile(Safe):
    """Records which Hypothesis profile is loaded while graphsafe runs it."""

    def prepare(self, batch):
        SEEN_PROFILES.add(hypothesis.settings.get_current_profile_name())
        super().prepare(batch)
'''
)

BROKEN = 'raise ImportError("this module is broken on purpose")\n'

# emulator, few examples, short sequences: seconds per run
FAST = [
    "-p",
    "no:cacheprovider",
    "--graphsafe-engine",
    "emulate",
    "--graphsafe-examples",
    "5",
    "--graphsafe-steps",
    "2",
]


@pytest.fixture
def gs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory holding the synthetic targets (``mymod``) and an unimportable module."""
    for var in OUTER_RUN_VARS:
        monkeypatch.delenv(var, raising=False)
    # in-process runs with --graphsafe-engine emulate switch Triton to its interpreter for the whole
    # process; put TRITON_INTERPRET back afterwards so that later tests on a GPU machine compile kernels
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    pytester.makepyfile(mymod=TARGETS, broken=BROKEN)
    pytester.syspathinsert()  # in-process runs import mymod from here; subprocesses get it on PYTHONPATH
    return pytester


def run_sub(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*plugin_args(), *FAST, *args, timeout=300)


def run_in(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """In-process, for runs that check nothing (collection, usage errors).

    Runs that execute checks go to a subprocess: pytester drops the modules an in-process
    run imported, and torch/Triton extension submodules cannot be imported a second time.
    Engine auto: emulate would switch this process's Triton to the interpreter on a GPU machine.
    """
    return pytester.runpytest_inprocess(
        *plugin_args(), "-p", "no:cacheprovider", "--graphsafe-engine", "auto", "--graphsafe-examples", "5", *args
    )


# -- a run that does not ask for graphsafe -----------------------------------------------------
PLAIN_TEST = """
import json
import os
import sys


def test_plain(request):
    facts = {"torch": "torch" in sys.modules, "triton": "triton" in sys.modules,
             "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
             "plugin": any(request.config.pluginmanager.has_plugin(n) for n in ("graphsafe", "graphsafe.frontend.plugin"))}
    with open("facts.json", "w") as f:
        json.dump(facts, f)
"""


@pytest.mark.parametrize("asked", [False, True], ids=["not-asked", "asked"])
def test_a_run_that_does_not_ask_imports_neither_torch_nor_triton_and_leaves_triton_interpret_unset(
    pytester, monkeypatch, asked
):
    # a directory of another project: one plain test, no conftest, no ini; graphsafe installed
    for var in (*OUTER_RUN_VARS, "TRITON_INTERPRET"):
        monkeypatch.delenv(var, raising=False)
    pytester.makepyfile(test_plain=PLAIN_TEST)
    ask = ["--graphsafe-engine", "emulate"] if asked else []
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", *ask, timeout=300)
    result.assert_outcomes(passed=1)
    facts = json.loads((pytester.path / "facts.json").read_text())
    assert facts["plugin"] is True  # the plugin was loaded, and did nothing
    if asked:  # the same run asking for graphsafe: the engine is prepared before test modules import
        assert facts["torch"] is True and facts["TRITON_INTERPRET"] == "1", facts
    else:
        assert facts == {"torch": False, "triton": False, "TRITON_INTERPRET": None, "plugin": True}


LATE_TESTS = """
import sys


def test_before():
    assert "graphsafe.frontend.items" not in sys.modules


def test_uses_fixture(graphsafe):
    assert "graphsafe.frontend.items" in sys.modules
    graphsafe.check("mymod:Safe", probes=["stale-pointer"], capture_sizes=[1], examples=2, engine="emulate")
"""


def test_the_fixture_imports_graphsafes_machinery_at_first_use(gs):
    gs.makepyfile(test_late=LATE_TESTS)
    result = gs.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "-p", "no:randomly", timeout=300)
    result.assert_outcomes(passed=2)


# -- items ---------------------------------------------------------------------------------
def test_one_item_per_target_passes_or_fails_with_the_finding(gs):
    result = run_sub(
        gs,
        "-v",
        "--graphsafe",
        "mymod:Safe",
        "--graphsafe",
        "mymod:Fresh",
        "--graphsafe-probes",
        "stale-pointer,unpersisted-metadata",
        "--graphsafe-capture-sizes",
        "2",
    )
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "graphsafe[mymod:Safe] PASSED" in out
    assert "graphsafe[mymod:Fresh] FAILED" in out
    assert "graphsafe: 2 target(s), engine emulate, profile fast, 5 examples" in out
    text = failure_sections(result)["graphsafe[mymod:Fresh]"]
    assert text.startswith("stale-pointer: buffer:self.lens\nmymod:Fresh on emulate at Support.ALWAYS (max_reqs=2, ")
    assert "\nmymod:Fresh on emulate: stale-pointer" in text
    assert "stale-pointer: the graph reads freed memory" in text
    assert "at: self.lens" in text  # the path
    assert re.search(r"step 0: Batch\(q=\[\d+(, \d+)*\], seq=", text)  # the minimal step sequence
    assert "fix: " in text
    assert "Traceback" not in out and "site-packages" not in out
    # the short summary names the kind and the cause, not the target again
    assert "FAILED graphsafe[mymod:Fresh] - stale-pointer: buffer:self.lens" in result.outlines


def test_targets_spread_over_xdist_workers_and_write_reports_to_one_folder(gs, tmp_path):
    reports = tmp_path / "reports"
    result = run_sub(
        gs,
        "-n",
        "2",
        "-v",
        "--graphsafe",
        "mymod:Safe",
        "--graphsafe",
        "mymod:Fresh",
        "--graphsafe",
        "mymod:Fresh2",
        "--graphsafe-probes",
        "stale-pointer",
        "--graphsafe-capture-sizes",
        "1,2",
        "--graphsafe-report-dir",
        str(reports),
    )
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert "2 workers [3 items]" in out  # both workers collected the same 3 items
    workers = set(re.findall(r"\[(gw\d)\] .*graphsafe\[mymod:", out))
    assert workers == {"gw0", "gw1"}, out  # xdist's default --dist load spread the targets
    sections = failure_sections(result)
    assert sorted(sections) == ["graphsafe[mymod:Fresh2]", "graphsafe[mymod:Fresh]"]
    dirs = set()
    for text in sections.values():
        assert "stale-pointer: the graph reads freed memory" in text and "at: self.lens" in text
        dirs.add(os.path.dirname(re.search(r"report: (\S+)", text).group(1)))
        assert os.path.isfile(os.path.join(re.search(r"report: (\S+)", text).group(1), "finding.json"))
    assert {os.path.dirname(d) for d in dirs} == {str(reports)}  # one folder for every worker's reports
    assert "Traceback" not in out


def test_targets_spread_over_xdist_transports_like_several_hosts(gs, tmp_path):
    # --tx 2*popen: the same execnet transport several hosts use (ssh=...), here two local processes
    reports = tmp_path / "reports"
    result = run_sub(
        gs,
        "--tx",
        "2*popen",
        "--dist",
        "load",
        "-v",
        "--graphsafe",
        "mymod:Fresh",
        "--graphsafe",
        "mymod:Fresh2",
        "--graphsafe-probes",
        "stale-pointer",
        "--graphsafe-capture-sizes",
        "2",
        "--graphsafe-report-dir",
        str(reports),
    )
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert set(re.findall(r"\[(gw\d)\] .*graphsafe\[mymod:", out)) == {"gw0", "gw1"}, out
    assert sorted(os.listdir(reports)) == ["mymod_Fresh", "mymod_Fresh2"]


def test_collection_ids_order_ini_and_overrides(gs):
    gs.makeini(
        """
        [pytest]
        graphsafe_targets =
            mymod:Fresh
            mymod:Safe
        graphsafe_probes = stale-pointer,lazy-init
        graphsafe_profile = thorough
        """
    )
    result = run_in(gs, "--collect-only", "-q")
    ids = [line for line in result.outlines if line.startswith("graphsafe[")]
    assert ids == ["graphsafe[mymod:Fresh]", "graphsafe[mymod:Safe]"]  # the given order (buggy first here too)
    # the command line wins over the ini; duplicates collapse; -k selects items
    result = run_in(
        gs,
        "--collect-only",
        "-q",
        "--graphsafe",
        "mymod:Safe",
        "--graphsafe",
        "mymod:Safe",
        "--graphsafe",
        "mymod:Fresh",
        "--graphsafe-profile",
        "ci",
        "-k",
        "Fresh",
    )
    ids = [line for line in result.outlines if line.startswith("graphsafe[")]
    assert ids == ["graphsafe[mymod:Fresh]"]
    # the header shows the profile and the examples it implies (--graphsafe-examples wins over the profile)
    result = run_in(gs, "--collect-only")
    assert (
        "graphsafe: 2 target(s), engine auto, profile thorough, 5 examples, probes stale-pointer,lazy-init"
        in result.stdout.str()
    )
    result = gs.runpytest_inprocess(*plugin_args(), "-p", "no:cacheprovider", "--collect-only")
    assert "graphsafe: 2 target(s), engine auto, profile thorough, 200 examples (the profile's)" in result.stdout.str()


def test_one_item_whatever_the_probes_and_sizes(gs):
    result = run_in(gs, "--collect-only", "-q", "--graphsafe", "mymod:Safe", "--graphsafe-capture-sizes", "1,2")
    ids = [line for line in result.outlines if line.startswith("graphsafe[")]
    assert ids == ["graphsafe[mymod:Safe]"]
    assert "probes all" in run_in(gs, "--collect-only", "--graphsafe", "mymod:Safe").stdout.str()


def test_items_run_longest_expected_first(gs):
    # no earlier durations: buggy variants (their findings are shrunk and diagnosed: the longest on the
    # reference suite) first, then targets expected to pass (a fixed variant, or a target that does
    # not say), targets that cannot be resolved (an error at once) last; ties keep the given order
    result = run_in(
        gs,
        "--collect-only",
        "-q",
        "--graphsafe",
        "nosuch",
        "--graphsafe",
        "flex:fresh_metadata",
        "--graphsafe",
        "mymod:Fresh",
        "--graphsafe",
        "flex",
        "--graphsafe",
        "mymod:WrongType",
    )
    ids = [line for line in result.outlines if line.startswith("graphsafe[")]
    assert ids == [
        "graphsafe[flex:fresh_metadata]",
        "graphsafe[mymod:Fresh]",
        "graphsafe[flex]",
        "graphsafe[mymod:WrongType]",
        "graphsafe[nosuch]",
    ]  # WrongType: no `expected`


def test_durations_are_recorded_in_the_cache_and_order_the_next_run(gs):
    # under xdist the controller sees every report and writes the cache
    result = gs.runpytest_subprocess(
        *plugin_args(),
        *FAST[2:],
        "-n",
        "2",
        "--graphsafe",
        "mymod:Safe",
        "--graphsafe",
        "mymod:Fresh",
        "--graphsafe-probes",
        "stale-pointer",
        "--graphsafe-capture-sizes",
        "2",
        "--junitxml",
        "junit.xml",
        timeout=300,
    )
    result.assert_outcomes(passed=1, failed=1)
    recorded = json.loads((gs.path / ".pytest_cache" / "v" / "graphsafe" / "durations").read_text())
    assert list(recorded) == ["emulate"]  # the engine the workers' items reported
    assert sorted(recorded["emulate"]) == ["mymod:Fresh", "mymod:Safe"]
    assert all(s > 0 for s in recorded["emulate"].values())
    # every item says which worker ran it and how long each sandbox child it waited for took to start
    for case in ET.parse(gs.path / "junit.xml").getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["graphsafe_worker"] in ("gw0", "gw1") and props["graphsafe_engine"] == "emulate"
        startups = json.loads(props["graphsafe_startups"])
        assert [s["method"] for s in startups] == ["forkserver"] and startups[0]["seconds"] > 0, startups
    # a recorded duration wins over the given order and over the kind (Fresh, buggy, would go first)
    long_safe = {"mymod:Fresh": 1.0, "mymod:Safe": 100.0}
    (gs.path / ".pytest_cache" / "v" / "graphsafe" / "durations").write_text(
        json.dumps({"emulate": long_safe, "cuda": long_safe})
    )
    result = gs.runpytest_inprocess(
        *plugin_args(),
        "--graphsafe-examples",
        "5",
        "--collect-only",
        "-q",
        "--graphsafe",
        "mymod:Fresh",
        "--graphsafe",
        "mymod:Safe",
    )
    assert [line for line in result.outlines if line.startswith("graphsafe[")] == [
        "graphsafe[mymod:Safe]",
        "graphsafe[mymod:Fresh]",
    ]


def test_longest_first_order():
    kinds = {"a": "passes", "b": "finds", "c": "error", "d": "passes", "e": "finds"}
    assert schedule.longest_first(list(kinds), kinds, {}) == ["b", "e", "a", "d", "c"]  # by kind, then given order
    # recorded seconds, longest first; an untimed target counts as the median of its kind (d: a's 7 s),
    # or as the longest when none of its kind has a time; a target that cannot be resolved is last
    assert schedule.longest_first(list(kinds), kinds, {"b": 5.0, "e": 9.0, "a": 7.0, "c": 99.0}) == [
        "e",
        "a",
        "d",
        "b",
        "c",
    ]
    assert schedule.longest_first(list(kinds), kinds, {"e": 9.0, "b": 5.0}) == ["a", "d", "e", "b", "c"]
    # under xdist, each worker's first chunk (two items here) is one of the longest, then the shortest
    timed = {"b": 5.0, "e": 9.0, "a": 7.0}
    assert schedule.longest_first(list(kinds), kinds, timed, workers=2) == ["e", "c", "a", "b", "d"]
    assert schedule.longest_first(list(kinds), kinds, timed, workers=3) == ["e", "a", "d", "c", "b"]  # one each
    assert schedule.longest_first(list(kinds), kinds, timed, workers=2, others=4) == ["e", "a", "d", "b", "c"]
    # an xdist worker orders by what the controller handed over, not by its own cache (another host has another)
    worker = SimpleNamespace(workerinput={schedule.WORKER_KEY: {"emulate": {"a": 1.0}}}, cache=None)
    assert schedule.history(worker, "emulate") == {"a": 1.0}
    assert schedule.history(SimpleNamespace(workerinput={}), "emulate") == {}
    assert [schedule.kind_of(t) for t in ("flex", "flex:fresh_metadata", "nosuch")] == ["passes", "finds", "error"]


def test_targets_that_cannot_be_checked_are_errors_with_one_line(gs):
    result = run_sub(
        gs,
        "--graphsafe",
        "broken:Anything",
        "--graphsafe",
        "mymod:NoForward",
        "--graphsafe",
        "mymod:WrongType",
        "--graphsafe",
        "nosuch",
        "--graphsafe",
        "mymod:Missing",
        "--graphsafe-probes",
        "stale-pointer",
        "--graphsafe-capture-sizes",
        "1",
    )
    result.assert_outcomes(errors=5)
    sections = error_sections(result)
    expected = {
        "broken:Anything": "usage error: target 'broken:Anything': module 'broken' does not import: ImportError: "
        "this module is broken on purpose",
        "mymod:NoForward": "contract error: NoForward has no forward() method",
        "mymod:WrongType": "contract error: mymod:WrongType: forward() must return a tensor",
        "nosuch": "usage error: unknown target 'nosuch'",
        "mymod:Missing": "has no attribute 'Missing'",
    }
    assert sorted(sections) == sorted(f"graphsafe[{k}]" for k in expected)
    for name, needle in expected.items():
        text = sections[f"graphsafe[{name}]"]
        assert needle in text, (name, text)
        assert text.startswith("graphsafe: ") and "\n" not in text, (name, text)  # one line, no traceback
    assert "Traceback" not in result.stdout.str()


def test_usage_errors(gs):
    result = run_in(gs, "--graphsafe", "mymod:Safe", "--graphsafe-engine", "bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "graphsafe: --graphsafe-engine: unknown engine 'bogus'" in result.stderr.str()
    result = run_in(gs, "--graphsafe", "mymod:Safe", "--graphsafe-probes", "stale-pointr")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown probe 'stale-pointr'" in result.stderr.str()
    result = run_in(gs, "--graphsafe", "mymod:Safe", "--graphsafe-capture-sizes", "1,x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--graphsafe-capture-sizes: expected an integer, got 'x'" in result.stderr.str()


def test_capture_sizes_beyond_the_spec_are_dropped_and_none_left_is_an_error(gs):
    result = run_sub(
        gs, "--graphsafe", "mymod:Fresh", "--graphsafe-probes", "stale-pointer", "--graphsafe-capture-sizes", "2,8"
    )
    result.assert_outcomes(failed=1)
    assert "captured with: Batch(" in result.stdout.str() and "(size 2)" in result.stdout.str()
    result = run_in(gs, "--graphsafe", "mymod:Safe", "--graphsafe-capture-sizes", "8")
    result.assert_outcomes(errors=1)
    assert "no capture size in [8] fits its spec (max_reqs=2)" in result.stdout.str()


# -- fixture and marker ---------------------------------------------------------------------
FIXTURE_TESTS = """
import pytest
from mymod import Safe, Fresh


def test_safe(graphsafe):
    result = graphsafe.check(Safe, probes=["stale-pointer"], capture_sizes=[2])
    assert result.ok and result.engine == "emulate" and 1 <= result.examples <= 5


@pytest.mark.graphsafe(examples=2, probes=["stale-pointer", "lazy-init"], capture_sizes=[1])
def test_marker_overrides_defaults(graphsafe):
    result = graphsafe.check("mymod:Safe")
    assert result.probes == ("lazy-init", "stale-pointer")
    assert 1 <= result.examples <= 2


@pytest.mark.graphsafe(probes=["stale-pointer"], examples=50)
class TestClosestMarkerWins:
    @pytest.mark.graphsafe(capture_sizes=[1], examples=2)
    def test_it(self, graphsafe):
        result = graphsafe.check(Safe, steps=1)
        assert result.probes == ("stale-pointer",) and result.examples <= 2


@pytest.mark.graphsafe(probes=["stale-pointer"], capture_sizes=[2])
def test_unsafe_fails_with_findings(graphsafe):
    graphsafe.check(Fresh)


def test_target_error_is_one_line(graphsafe):
    graphsafe.check("broken:Anything")
"""


def test_fixture_and_marker(gs):
    gs.makepyfile(test_uses_fixture=FIXTURE_TESTS)
    result = run_sub(gs, "--strict-markers")
    result.assert_outcomes(passed=3, failed=2)
    sections = failure_sections(result)
    text = sections["test_unsafe_fails_with_findings"]
    assert "mymod:Fresh on emulate: stale-pointer" in text
    assert "at: self.lens" in text and "step 0: Batch(" in text
    assert "def test_unsafe_fails_with_findings" not in text  # pytrace=False: no source, no traceback
    text = sections["test_target_error_is_one_line"]
    assert text.startswith("graphsafe: usage error: target 'broken:Anything': module 'broken' does not import")
    assert "\n" not in text
    assert "Traceback" not in result.stdout.str() and "During handling" not in result.stdout.str()


def test_ci_profile_applies_to_graphsafe_only(gs, monkeypatch):
    # With CI set, Hypothesis loads its own "ci" profile; graphsafe's checks must run under
    # graphsafe-ci, and everything else must keep Hypothesis' profile.
    monkeypatch.setenv("CI", "true")
    gs.makepyfile(
        test_profile="""
import hypothesis
import mymod


def test_profile(graphsafe):
    before = hypothesis.settings.get_current_profile_name()
    graphsafe.check(mymod.RecordsProfile, probes=["stale-pointer"], capture_sizes=[1], examples=2)
    assert mymod.SEEN_PROFILES == {"graphsafe-ci"}
    assert hypothesis.settings.get_current_profile_name() == before == "ci"
"""
    )
    result = gs.runpytest_subprocess(
        *plugin_args(),
        "-p",
        "no:cacheprovider",
        "--graphsafe-engine",
        "emulate",
        "--graphsafe",
        "mymod:Safe",
        "--graphsafe-probes",
        "stale-pointer",
        "--graphsafe-capture-sizes",
        "1",
        timeout=300,
    )
    result.assert_outcomes(passed=2)
    assert "profile ci, 25 examples" in result.stdout.str()


# -- helpers (no pytest run) -----------------------------------------------------------------
def test_option_parsing():
    assert frontend.parse_sizes("4, 1,2,2") == (1, 2, 4)
    assert frontend.parse_sizes("") is None
    assert frontend.parse_probes(None) == tuple(PROBES)
    assert frontend.parse_probes("lazy-init,stale-pointer") == ("lazy-init", "stale-pointer")
    assert frontend.parse_probes(["all"]) == tuple(PROBES)
    with pytest.raises(UsageError, match="unknown probe"):
        frontend.parse_probes("nope")
    assert frontend.parse_engine(" Emulate ") == "emulate"
    with pytest.raises(UsageError):
        frontend.parse_int("0", "--graphsafe-examples")
    assert frontend.expand_targets(["b", "a,b", "a"]) == ["b", "a"]


def test_all_expands_to_the_registry():
    assert frontend.expand_targets(["all"]) == names()


def test_profiles(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert frontend.profile_name(None) == "graphsafe-fast"
    for value, ci in [("true", True), ("1", True), ("yes", True), ("false", False), ("0", False), ("", False)]:
        monkeypatch.setenv("CI", value)
        assert frontend.env_is_ci() is ci, value
    monkeypatch.setenv("CI", "true")
    assert frontend.profile_name(None) == "graphsafe-ci"
    assert frontend.profile_name("thorough") == "graphsafe-thorough"
    assert [frontend.default_examples(frontend.profile_name(p)) for p in ("fast", "ci", "thorough")] == [10, 25, 200]
    from hypothesis import settings

    frontend.register_profiles()
    ci = settings.get_profile("graphsafe-ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None and not ci.print_blob
    assert settings.get_profile("graphsafe-fast").deadline is None
    before = settings.get_current_profile_name()
    with frontend.hypothesis_profile("graphsafe-thorough"):
        assert settings.default.max_examples == 200
    assert settings.get_current_profile_name() == before


def test_xdist_worker_device(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert devices.worker_index() is None
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    assert devices.worker_index() == 5
    assert devices.assign_device("emulate") is None
    import torch

    calls = []
    monkeypatch.setattr(devices, "gpu_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", calls.append)
    assert devices.worker_device("auto") == 1 and calls == []  # nothing made current: the sandbox child does
    assert devices.assign_device("auto") == 1 and calls == [1]


def test_gpu_sharing_hint_appears_only_with_more_workers_than_gpus():
    assert gpu_sharing_hint(workers=4, gpus=1).startswith("graphsafe: 4 workers share 1 GPU(s); the GPU time-slices")
    assert gpu_sharing_hint(workers=2, gpus=2) is None
    assert gpu_sharing_hint(workers=8, gpus=0) is None  # no GPU: the emulator, nothing is shared

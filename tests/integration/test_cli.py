"""The ``graphsafe`` command line (graphsafe/frontend/cli.py): check, list, repro; exit codes and output."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from graphsafe.checker import names
from graphsafe.frontend import cli
from graphsafe.frontend.cli import main
from tests.subprocesses import with_path
from tests.targets.plain_torch import SOURCE

TARGETS = SOURCE

MOD = "gs_cli_targets"
FAST = ["--engine", "emulate", "--examples", "5", "--steps", "2", "--capture-sizes", "2"]
PROBES = ["--probes", "stale-pointer,unpersisted-metadata"]


@pytest.fixture
def targets(tmp_path, monkeypatch):
    """``gs_cli_targets`` importable from tmp_path, which is also the working directory."""
    (tmp_path / f"{MOD}.py").write_text(TARGETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, MOD, raising=False)
    monkeypatch.delenv("CI", raising=False)
    # --engine emulate switches Triton to its interpreter for the whole process: restore it afterwards
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    yield tmp_path
    sys.modules.pop(MOD, None)


def table_rows(out: str) -> dict[str, list[str]]:
    """Table row name -> cells (the header row is keyed 'target')."""
    rows = {}
    for line in out.splitlines():
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        if set(cells[0]) != {"-"}:
            rows[cells[0]] = cells[1:]
    return rows


def test_check_unsafe_exits_1_with_table_and_findings(targets, capsys):
    rc = main(["check", f"{MOD}:Safe", f"{MOD}:Fresh", *FAST, *PROBES])
    out, err = capsys.readouterr()
    assert rc == 1
    rows = table_rows(out)
    assert rows["target"] == ["stale-pointer", "unpersisted-metadata", "other"]
    assert rows[f"{MOD}:Safe"] == ["ok", "ok", "ok"]
    assert rows[f"{MOD}:Fresh"] == ["stale-pointer", "not reached", "-"]  # the finding ended the search
    assert f"{MOD}:Fresh: stale-pointer" in out
    assert "stale-pointer: the graph reads freed memory" in out and "at: self.lens" in out
    assert "step 0: Batch(" in out and "fix: " in out
    assert re.search(rf"^\[1/2\] {MOD}:Safe \.\.\. ok \(\d+\.\ds\)$", err, re.M), err
    assert re.search(rf"^\[2/2\] {MOD}:Fresh \.\.\. stale-pointer \(\d+\.\ds\)$", err, re.M), err


def test_check_safe_exits_0(targets, capsys):
    rc = main(["check", f"{MOD}:Safe", *FAST, "--probes", "stale-pointer", "--seed", "3"])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert table_rows(out)[f"{MOD}:Safe"] == ["ok", "ok"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "nosuch"], "graphsafe: error: unknown target 'nosuch'"),
        (["check", "nosuch_module_xyz:Cls"], "module 'nosuch_module_xyz' does not import"),
        (["check", f"{MOD}:Missing"], f"module '{MOD}' has no attribute 'Missing'"),
        (["check", f"{MOD}:Safe", "--engine", "bogus"], "--engine: unknown engine 'bogus'"),
        (["check", f"{MOD}:Safe", "--probes", "nope"], "--probes: unknown probe 'nope'"),
        (["check", f"{MOD}:Safe", "--examples", "0"], "--examples: must be >= 1"),
        (
            ["check", f"{MOD}:Safe", "--capture", "wrost"],
            "--capture: unknown capture policy 'wrost'; did you mean worst? choose explore or some of worst, ",
        ),
        (["check"], "the following arguments are required: TARGET"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "required"),
    ],
)
def test_usage_errors_exit_2_without_a_traceback(targets, capsys, argv, message):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert message in err
    assert "Traceback" not in err + out
    assert "function" not in err  # the command line takes names only


def test_contract_error_at_run_time_exits_2(targets, capsys):
    rc = main(["check", f"{MOD}:Safe", f"{MOD}:WrongType", *FAST, "--probes", "stale-pointer"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert f"graphsafe: error: {MOD}:WrongType: forward() must return a tensor" in err
    rows = table_rows(out)
    assert rows[f"{MOD}:Safe"] == ["ok", "ok"]
    assert rows[f"{MOD}:WrongType"] == ["-", "ERROR"]
    assert "Traceback" not in err


def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert "graphsafe 0." in capsys.readouterr().out
    assert main(["check", "--help"]) == 0
    assert "--capture-sizes" in capsys.readouterr().out


def test_list_prints_every_registered_target_once_sorted_then_the_flashinfer_and_vllm_targets(capsys):
    from graphsafe import flashinfer, vllm

    assert main(["list"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    registered = names() + flashinfer.names() + vllm.names()
    assert [line.split()[0] for line in lines[: len(registered)]] == registered  # one per line
    for group, missing in (("flashinfer", flashinfer.requirement()), ("vllm", vllm.requirement())):
        [line] = [x for x in lines if x.startswith(f"the {group}:* targets")]
        assert line.endswith(f"cannot run here: {missing}" if missing else "can run here")


def test_list_shows_each_reference_kernels_expected_verdict_and_first_sentence(capsys):
    reference = pytest.importorskip(
        "graphsafe.reference",
        reason="the reference kernels need triton (its interpreter without a GPU), which is not installed",
    )
    assert main(["list"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert set(reference.names()) <= {line.split()[0] for line in lines}
    by_name = {line.split()[0]: line for line in lines}
    assert by_name["flex:fresh_metadata"].endswith("[expected: unpersisted-metadata]")
    assert by_name["flex"].endswith("[expected: ok]")
    # the docstring's first sentence, whole and without reST markup
    assert "Buggy: prepare rebinds self.meta to the step's freshly built tensors. " in by_name["flex:fresh_metadata"]
    assert "``" not in "".join(lines)


def test_repro_calls_reports(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(cli, "repro_main", lambda path, engine=None, timeout=None: calls.append((path, engine)) or 1)
    assert main(["repro", str(tmp_path), "--engine", "emulate"]) == 1
    assert calls == [(str(tmp_path), "emulate")]
    assert main(["repro", str(tmp_path)]) == 1
    assert calls[-1] == (str(tmp_path), None)  # no --engine: the report's recorded engine


def test_report_then_repro_round_trip(targets, capfd):
    reports = targets / "reports"
    assert main(["check", f"{MOD}:Fresh", *FAST, "--probes", "stale-pointer", "--report-dir", str(reports)]) == 1
    out = capfd.readouterr().out
    path = re.search(r"report: (\S+)", out).group(1)
    assert os.path.isfile(os.path.join(path, "finding.json"))
    assert main(["repro", path, "--engine", "emulate"]) == 1  # still reproduces (the replay prints from its child)
    assert "REPRODUCED" in capfd.readouterr().out


def test_a_check_that_no_longer_finds_a_reported_bug_removes_its_report_and_says_so(targets, capsys):
    reports = targets / "reports"
    assert main(["check", f"{MOD}:Fresh", *FAST, "--probes", "stale-pointer", "--report-dir", str(reports)]) == 1
    found = re.search(r"report: (\S+)", capsys.readouterr().out).group(1)
    # the same report as an earlier, buggy Safe would have written it: Safe is the fixed version
    old = reports / f"{MOD}_Safe" / os.path.basename(found)
    shutil.copytree(found, old)
    data = json.loads((old / "finding.json").read_text())
    (old / "finding.json").write_text(json.dumps({**data, "target": f"{MOD}:Safe"}))
    assert main(["check", f"{MOD}:Safe", *FAST, "--probes", "stale-pointer", "--report-dir", str(reports)]) == 0
    out = capsys.readouterr().out
    assert not old.exists()
    assert (
        f"note ({MOD}:Safe): removed stale report reports/{MOD}_Safe/{old.name}: not found by this run, "
        "and its recorded steps now pass" in out.splitlines()
    )
    assert os.path.isdir(found)  # another target's report stays


def test_python_m_graphsafe(targets):
    env = dict(os.environ, PYTHONPATH=with_path(targets))
    env.pop("CI", None)
    proc = subprocess.run(
        [sys.executable, "-m", "graphsafe", "check", f"{MOD}:Fresh", *FAST, "--probes", "stale-pointer"],
        cwd=targets,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert table_rows(proc.stdout)[f"{MOD}:Fresh"] == ["stale-pointer", "-"]
    assert "[1/1] gs_cli_targets:Fresh ... stale-pointer" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(shutil.which("graphsafe") is None, reason="the graphsafe console script is not on PATH")
def test_console_script_usage_error():
    proc = subprocess.run(["graphsafe", "check", "nosuch"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("graphsafe: error: unknown target 'nosuch'")
    assert "Traceback" not in proc.stderr


def test_a_ctrl_c_swallowed_inside_a_check_still_stops_the_run_before_the_next_target(targets, monkeypatch, capsys):
    import signal

    ran = []
    real = cli.run

    def run_that_swallows(cls, *args, **kwargs):
        ran.append(cls.__name__)
        try:
            os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C landed in a garbage-collector callback
        except KeyboardInterrupt:
            pass
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(cli, "run", run_that_swallows)
    # as in a terminal: Ctrl-C raises (an earlier test in this worker may have left SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    before = signal.getsignal(signal.SIGINT)
    assert main(["check", f"{MOD}:Safe", f"{MOD}:Fresh", *FAST, "--probes", "stale-pointer"]) == 130
    assert ran == ["Safe"]  # Fresh never started
    assert "graphsafe: interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back


def test_jobs_check_several_targets_at_once_with_the_same_table_as_one_at_a_time(capsys):
    targets = [
        "tests.targets.synthetic:Safe",
        "tests.targets.synthetic:FreshLens",
        "tests.targets.synthetic:NewMetadata",
    ]
    argv = ["check", *targets, *FAST, "--isolate", "--seed", "1"]
    assert main(argv) == 1
    one_at_a_time, _ = capsys.readouterr()
    assert main([*argv, "--jobs", "3"]) == 1
    at_once, err = capsys.readouterr()
    assert table_rows(at_once) == table_rows(one_at_a_time)
    assert table_rows(at_once)["tests.targets.synthetic:FreshLens"][1] == "stale-pointer"
    assert re.search(r"^\[2/3\] tests\.targets\.synthetic:FreshLens: stale-pointer \(\d+\.\ds\)$", err, re.M), err

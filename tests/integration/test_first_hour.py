"""A user's first hour: exit codes CI can trust, errors that say what to do, timeouts in every mode,
a contract that takes what people write, and a clean install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import graphsafe
from graphsafe import CaptureSpec, ContractError, SpecError, TargetTimeout, UsageError
from graphsafe.frontend.cli import main
from graphsafe.frontend.options import keywords, resolve
from tests.subprocesses import REPO, env_with_repo
from tests.targets import plain_torch

FAST = ["--engine", "emulate", "--examples", "3", "--steps", "2", "--capture-sizes", "2", "--capture", "worst"]

TARGETS = (
    plain_torch.SOURCE
    + '''

class RaisesInSetup(Safe):
    def setup(self, spec, device):
        raise RuntimeError("setup is broken on purpose")


class DuckTyped:
    """Not a graphsafe.Target, no static() and no live(): the defaults apply."""

    support = graphsafe.Support.ALWAYS
    default_spec = graphsafe.CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, block_size=4)
    setup, prepare, forward = Safe.setup, Safe.prepare, Safe.forward


class Unset(graphsafe.Target):
    """A Target that never sets support."""

    default_spec = Safe.default_spec
    setup, prepare, forward = Safe.setup, Safe.prepare, Safe.forward


class ReturnsOne(Safe):
    """forward() returns one tensor: live() gets that tensor, not a tuple."""

    SEEN = []

    def live(self, outputs, batch):
        ReturnsOne.SEEN.append(type(outputs).__name__)
        return outputs[: batch.num_tokens]


class ReturnsList(Safe):
    def forward(self):
        return [super().forward()]


class SpinsInPrepare(Safe):
    def prepare(self, batch):
        if batch.seed != graphsafe.contract.CAPTURE_SEED:
            while True:
                pass
        super().prepare(batch)
'''
)


@pytest.fixture
def mod(tmp_path, monkeypatch):
    """``firsthour`` importable from tmp_path, the working directory, and nowhere else."""
    (tmp_path / "firsthour.py").write_text(TARGETS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "firsthour", raising=False)
    yield tmp_path
    sys.modules.pop("firsthour", None)


def cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = env_with_repo()
    return subprocess.run(
        [sys.executable, "-m", "graphsafe", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


# -- exit codes ----------------------------------------------------------------------------------
def test_exit_0_for_no_findings_1_for_findings(mod, capsys):
    assert main(["check", "firsthour:Safe", *FAST]) == 0
    assert main(["check", "firsthour:Fresh", *FAST]) == 1


def test_exit_2_for_a_class_that_breaks_the_contract_without_a_traceback(mod, capsys):
    assert main(["check", "firsthour:NoForward", *FAST]) == 2
    err = capsys.readouterr().err
    assert "graphsafe: error: NoForward has no forward() method" in err and "Traceback" not in err


def test_exit_3_when_the_target_itself_fails_to_run(mod, capsys):
    assert main(["check", "firsthour:RaisesInSetup", *FAST]) == 3
    assert "target-error: setup(spec, device) raised RuntimeError" in capsys.readouterr().out


def test_exit_4_with_a_traceback_for_graphsafes_own_error(mod, capsys, monkeypatch):
    from graphsafe.frontend import cli as cli_module

    def broken(*args, **kwargs):
        raise graphsafe.InternalError(
            "graphsafe failed: KeyError: 'x'",
            exc_type="KeyError",
            traceback="Traceback (most recent call last):\n  ...\nKeyError: 'x'\n",
        )

    monkeypatch.setattr(cli_module, "run", broken)
    assert main(["check", "firsthour:Safe", *FAST]) == 4
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_an_unexpected_exception_in_graphsafe_without_isolation_is_exit_4_and_the_run_goes_on(mod, capsys, monkeypatch):
    from graphsafe.frontend import cli as cli_module

    real = cli_module.run

    def broken_once(target, *args, **kwargs):
        if kwargs.get("label") == "firsthour:Safe":
            raise KeyError("x")  # not a graphsafe error: a bug in graphsafe
        return real(target, *args, **kwargs)

    monkeypatch.setattr(cli_module, "run", broken_once)
    assert main(["check", "firsthour:Safe", "firsthour:RaisesInSetup", *FAST]) == 4
    captured = capsys.readouterr()
    assert "graphsafe failed: KeyError" in captured.err and "Traceback (most recent call last)" in captured.err
    assert "[2/2]" in captured.err  # the next target still ran


def test_a_report_folder_that_is_a_file_fails_before_any_check(mod, capsys, monkeypatch):
    from graphsafe.frontend import cli as cli_module

    checks = []
    monkeypatch.setattr(cli_module, "run", lambda target, *args, **kwargs: checks.append(target))
    (mod / "reports").write_text("not a directory")
    assert main(["check", "firsthour:Safe", *FAST, "--report-dir", "reports"]) == 2
    err = capsys.readouterr().err
    assert "report directory 'reports' is a file; give a directory" in err
    assert checks == [] and "[1/1]" not in err  # nothing ran


def test_a_misspelt_registered_name_gets_a_suggestion(capsys):
    assert main(["check", "flex:fresh_metdata"]) == 2
    assert "no registered target 'flex:fresh_metdata'; did you mean flex:fresh_metadata?" in capsys.readouterr().err


def test_module_colon_class_imports_from_the_current_directory_like_python_m(mod):
    proc = cli("check", "firsthour:Safe", *FAST, cwd=mod)
    assert proc.returncode == 0, proc.stderr


# -- the fixture's marker -------------------------------------------------------------------------
def test_a_marker_typo_is_one_line_naming_the_option():
    with pytest.raises(UsageError, match="unknown graphsafe option 'exampels'; did you mean examples?"):
        resolve(keywords({"exampels": 20}, "@pytest.mark.graphsafe({}=...)"), "fixture")


# -- timeouts in every mode -----------------------------------------------------------------------
def test_a_hang_without_isolation_is_stopped_by_the_timeout(mod):
    sys.path.insert(0, str(mod))
    import firsthour

    # first, a check that pays this process's one-time costs (imports, the emulator's set-up): on a loaded
    # machine they alone can take the 3 s, and the hang must be caught in prepare, not before
    graphsafe.check(firsthour.Safe, engine="emulate", examples=1, capture="worst", database=False)
    with pytest.raises(TargetTimeout) as info:  # SpinsInPrepare never returns: only the timeout ends it
        graphsafe.check(firsthour.SpinsInPrepare, engine="emulate", examples=2, capture="worst", timeout=3)
    assert info.value.exit_code == 3 and "no result within 3 s" in str(info.value)
    assert info.value.where.endswith(" in prepare") and "firsthour.py" in info.value.where


def test_the_cli_times_out_in_process_too(mod):
    proc = cli("check", "firsthour:SpinsInPrepare", *FAST, "--timeout", "3", cwd=mod)
    assert proc.returncode == 3, proc.stderr
    assert "TIMEOUT" in proc.stdout and "no result within 3 s" in proc.stderr


# -- the contract ---------------------------------------------------------------------------------
def test_live_gets_exactly_what_forward_returned(mod):
    sys.path.insert(0, str(mod))
    import firsthour

    r = graphsafe.check(firsthour.ReturnsOne, engine="emulate", examples=2, capture="worst", database=False)
    assert r.ok, r.summary()
    assert set(firsthour.ReturnsOne.SEEN) == {"Tensor"}


def test_a_list_from_forward_is_a_contract_error_like_none():
    with pytest.raises(ContractError, match=r"got list \(return a tuple\)"):
        graphsafe.engines.as_outputs([torch.zeros(1)])


def test_a_duck_typed_class_without_static_or_live_is_checked(mod):
    sys.path.insert(0, str(mod))
    import firsthour

    assert graphsafe.check(firsthour.DuckTyped, engine="emulate", examples=2, capture="worst", database=False).ok


def test_a_target_without_support_is_checked_at_the_lowest_level_with_a_warning(mod):
    sys.path.insert(0, str(mod))
    import firsthour

    r = graphsafe.check(firsthour.Unset, engine="emulate", examples=2, capture="worst", database=False)
    assert r.support == "UNIFORM_SINGLE_TOKEN_DECODE"
    assert any("does not set support" in n for n in r.notes), r.notes
    assert "at Support.UNIFORM_SINGLE_TOKEN_DECODE (max_reqs=2" in r.header


def test_the_cli_prints_support_and_spec_before_each_check(mod, capsys):
    assert main(["check", "firsthour:Safe", *FAST]) == 0
    assert (
        "checking firsthour:Safe at Support.ALWAYS, CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, "
        "block_size=4), capture worst, 3 examples"
    ) in capsys.readouterr().err


def test_capture_spec_rejects_duplicate_sizes_and_says_what_num_blocks_takes():
    with pytest.raises(SpecError, match=r"capture_sizes lists \[2\] more than once"):
        CaptureSpec(max_reqs=4, capture_sizes=(1, 2, 2))
    with pytest.raises(SpecError, match=r"num_blocks must be 0 \(the default: 33\) or >= 33, got -5"):
        CaptureSpec(max_reqs=4, max_seq_len=128, block_size=16, num_blocks=-5)


# -- install ----------------------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("gpu", [False, True], ids=["no-gpu", "gpu"])
def test_make_takes_pytorchs_cpu_wheels_without_a_gpu(tmp_path, gpu):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a stand-in nvidia-smi first on the path: answering (a GPU) or failing (none, also on a GPU host)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nexit {0 if gpu else 9}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    path = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    proc = subprocess.run(
        ["make", "-s", "-C", str(REPO), "torch", "PIP=echo pip"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    pip_line = [line for line in proc.stdout.splitlines() if line.startswith("pip install")][0]
    assert ("--index-url https://download.pytorch.org/whl/cpu" in pip_line) is (not gpu), proc.stdout

"""A repro says FIXED (exit 0) only when the target runs every step and the finding is gone.

A stale-pointer report of ``repro_targets:Flaky`` is written once; the module is then rewritten so
that ``Flaky`` is fixed, raises, crashes its process or cannot be loaded, and both the report's
``repro.py`` and ``graphsafe repro`` are asked again.  Each replay runs in a child process (a crash
must not take the repro down), so every case here starts one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphsafe.frontend.cli import main
from graphsafe.reports import _script
from tests.subprocesses import with_path
from tests.targets.plain_torch import SOURCE

MOD = "repro_targets"
CHECK = [
    "--engine",
    "emulate",
    "--examples",
    "5",
    "--steps",
    "2",
    "--capture-sizes",
    "2",
    "--probes",
    "stale-pointer",
    "--capture",
    "worst",
]

FLAKY = {
    "buggy": "class Flaky(Fresh):\n    pass\n",
    "fixed": "class Flaky(Safe):\n    pass\n",
    "raises": (
        "class Flaky(Safe):\n    def prepare(self, batch):\n"
        "        raise RuntimeError('prepare is broken on purpose')\n"
    ),
    "crashes": (
        "import ctypes\n\n\nclass Flaky(Safe):\n    def prepare(self, batch):\n"
        "        ctypes.string_at(0)  # read address 0: SIGSEGV\n"
    ),
    "gone": "",  # the class no longer exists
}


def _env() -> dict[str, str]:
    # no .pyc: the target's module is rewritten within the same second, and a cached one could be used
    return {**{k: v for k, v in os.environ.items() if k != "CI"}, "PYTHONDONTWRITEBYTECODE": "1"}


def _write(folder: Path, variant: str) -> None:
    (folder / f"{MOD}.py").write_text(SOURCE + "\n\n" + FLAKY[variant])


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A stale-pointer report of ``repro_targets:Flaky``, written by ``graphsafe check`` in a fresh process."""
    folder = tmp_path_factory.mktemp("repro")
    _write(folder, "buggy")
    env = _env()
    env["PYTHONPATH"] = with_path(folder)
    proc = subprocess.run(
        [sys.executable, "-m", "graphsafe", "check", f"{MOD}:Flaky", *CHECK, "--report-dir", str(folder / "reports")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    return Path(re.search(r"report: (\S+)", proc.stdout).group(1))


def _script_run(report: Path, variant: str) -> subprocess.CompletedProcess:
    """``python repro.py --engine emulate`` from the target's folder, after rewriting the target."""
    folder = report.parents[2]
    _write(folder, variant)
    env = _env()
    return subprocess.run(
        [sys.executable, str(report / "repro.py"), "--engine", "emulate"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _cli_run(report: Path, variant: str, capfd, monkeypatch) -> tuple[int, str]:
    """``graphsafe repro DIR --engine emulate`` (this process; the replay in its child)."""
    folder = report.parents[2]
    _write(folder, variant)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    rc = main(["repro", str(report), "--engine", "emulate"])
    out, err = capfd.readouterr()
    return rc, out + err


def test_the_script_reproduces_the_finding(report):
    proc = _script_run(report, "buggy")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REPRODUCED: stale-pointer is still there (exit 1)" in proc.stdout


def test_the_script_says_fixed_and_exits_0_once_the_target_runs_without_the_finding(report):
    proc = _script_run(report, "fixed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FIXED: no stale-pointer finding, and the target ran every step (exit 0)" in proc.stdout


def test_the_script_of_a_target_that_now_raises_exits_3_without_fixed(report):
    proc = _script_run(report, "raises")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "TARGET ERROR: the target raised" in proc.stdout and "prepare is broken on purpose" in proc.stdout
    assert "stale-pointer cannot be judged until it runs (exit 3)" in proc.stdout
    assert "FIXED" not in proc.stdout


def test_the_script_of_a_target_that_now_crashes_exits_3_without_fixed(report):
    proc = _script_run(report, "crashes")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "CRASHED: the target crashed the repro's process (SIGSEGV)" in proc.stdout
    assert f"{MOD}.py" in proc.stderr  # faulthandler: the target's frame
    assert "FIXED" not in proc.stdout


def test_the_script_of_a_target_that_cannot_be_loaded_exits_2_without_fixed(report):
    proc = _script_run(report, "gone")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "has no attribute 'Flaky'" in proc.stdout and "FIXED" not in proc.stdout


def test_graphsafe_repro_says_fixed_only_for_a_fixed_target(report, capfd, monkeypatch):
    rc, text = _cli_run(report, "fixed", capfd, monkeypatch)
    assert rc == 0 and "FIXED: no stale-pointer finding" in text, text


def test_graphsafe_repro_of_a_target_that_now_raises_exits_3_without_fixed(report, capfd, monkeypatch):
    rc, text = _cli_run(report, "raises", capfd, monkeypatch)
    assert rc == 3, text
    assert "TARGET ERROR: the target raised" in text and "FIXED" not in text


def test_graphsafe_repro_of_a_target_that_now_crashes_exits_3_without_fixed(report, capfd, monkeypatch):
    rc, text = _cli_run(report, "crashes", capfd, monkeypatch)
    assert rc == 3, text
    assert "CRASHED: the target crashed the repro's process (SIGSEGV)" in text and "FIXED" not in text


def test_a_replay_that_hangs_is_killed_after_the_timeout_and_exits_3(capfd):
    recipe = {
        "kind": "stale-pointer",
        "target": "tests.targets.broken:HangsInPrepare",
        "engine": "emulate",
        "steps": [],
        "capture_sizes": [1],
    }
    assert _script.run_isolated(recipe, engine="emulate", timeout=20) == 3
    out, _ = capfd.readouterr()
    assert "TIMEOUT: no result within 20 s: the target hangs" in out and "FIXED" not in out

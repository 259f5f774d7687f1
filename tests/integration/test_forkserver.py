"""Sandbox children fork from one fork server per process (graphsafe/frontend/sandbox/server.py).

The server imports torch, torch._dynamo, hypothesis and graphsafe once and never initialises
CUDA; every child after the first forks from it (in a fraction of a cold spawn's time: measured by
``benchmarks/scaling.py --startups``) and keeps every
isolation guarantee: a crash fails only its target and the next check gets a fresh child, stack
dumps say where, SIGTERM unwinds, a child whose parent dies exits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from graphsafe import TargetCrashed
from graphsafe.frontend.sandbox import Sandbox, server
from tests.integration.test_isolation import in_box
from tests.subprocesses import REPO, env_with_repo

needs_cuda = pytest.mark.cuda  # skipped where CUDA is not available (tests/conftest.py)

SAFE = "tests.targets.synthetic:Safe"


def _start(target: str, method: str = "auto") -> Sandbox:
    box = Sandbox(target, engine="emulate", method=method)
    box.start(wait=True, timeout=120)
    return box


def test_a_child_after_the_first_forks_from_the_server_and_inherits_no_cuda():
    # how much faster a forked child starts than a spawned one is measured by benchmarks/scaling.py
    # (--startups), not asserted here: wall-clock ratios fail under load
    cold = _start(SAFE, method="spawn")
    cold.close()
    first = _start(SAFE)  # may pay for starting this process's fork server
    try:
        second = _start("tests.targets.synthetic:DeviceScale")
        try:
            assert [s["method"] for s in cold.startups] == ["spawn"] and cold.inherited is None
            assert second.startups[-1]["method"] == "forkserver", second.startups
            state = second.inherited
            assert state is not None and state == first.inherited  # the same server
            assert state["pid"] not in (os.getpid(), second.pid, first.pid)
            assert state["cuda_initialized"] is False  # the server never initialised CUDA
            assert state["python_threads"] == 1  # nothing but the forking thread
            assert state["interpret"] is True  # this machine's engine, decided before the server started
            assert in_box(second, 60).ok
        finally:
            second.close()
    finally:
        first.close()


def test_a_crash_in_a_forked_child_fails_only_its_target_and_the_next_check_gets_a_fresh_child(tmp_path, monkeypatch):
    neighbour = _start(SAFE)
    # set after the server started: a child takes this process's environment, not the server's
    monkeypatch.setenv("GRAPHSAFE_CRASH_ONCE", str(tmp_path / "crashed"))
    box = Sandbox("tests.targets.broken:CrashesOnce", engine="emulate")
    try:
        with pytest.raises(TargetCrashed) as info:
            in_box(box, 60)
        assert info.value.exitcode == -signal.SIGSEGV
        assert info.value.where.startswith("tests/targets/broken.py:") and info.value.where.endswith(" in prepare")
        assert not box.alive and neighbour.alive
        assert in_box(box, 60).ok and box.started == 2  # a fresh child, and the target no longer crashes
        assert [s["method"] for s in box.startups] == ["forkserver", "forkserver"]
        assert in_box(neighbour, 60).ok and neighbour.started == 1  # the other target's child was not touched
    finally:
        box.close()
        neighbour.close()


def test_sigterm_unwinds_a_forked_child():
    box = _start(SAFE)
    try:
        assert box.startups[-1]["method"] == "forkserver"
        proc = box._proc
        os.kill(box.pid, signal.SIGTERM)
        proc.join(20)
        assert proc.exitcode == 128 + signal.SIGTERM  # its handler ran (a default SIGTERM reads -15)
    finally:
        box.close()


ORPHAN = """
import json, os, sys, time
from graphsafe.frontend.sandbox import Sandbox
box = Sandbox("tests.targets.synthetic:Safe", engine="emulate")
box.start(wait=True, timeout=120)
print(json.dumps({"pid": box.pid, "fault": box._fault_path, "method": box.startups[-1]["method"]}), flush=True)
time.sleep(600)
"""


def test_a_forked_child_exits_when_its_parent_is_killed(tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN], cwd=tmp_path, env=env_with_repo(), stdout=subprocess.PIPE, text=True
    )
    try:
        line = parent.stdout.readline()
        child = json.loads(line)
        assert child["method"] == "forkserver" and os.path.exists(child["fault"])
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _exists(child["pid"]):
            time.sleep(0.1)
        assert not _exists(child["pid"]), "the orphaned child did not exit"
        assert not os.path.exists(child["fault"])  # and removed its stack-dump file
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_a_child_the_server_cannot_serve_is_spawned(monkeypatch):
    assert server.context_for("emulate")[1] == "forkserver"  # the server serves this process's engine
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # read when torch initialises: the server has its own
    assert server.context_for("emulate")[1] == "spawn"
    monkeypatch.setenv("GRAPHSAFE_FORKSERVER", "0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert server.context_for("emulate")[1] == "spawn"  # switched off


def test_what_a_forked_child_inherited_is_checked():
    files = {name: sys.modules[name].__file__ for name in ("torch", "hypothesis", "graphsafe")}
    good = {"pid": 1, "interpret": True, "cuda_initialized": False, "python_threads": 1, "files": files}
    assert server.mismatch(good, "emulate") == ""
    assert "did not preload graphsafe" in server.mismatch(None, "emulate")
    assert "other engine" in server.mismatch({**good, "interpret": False}, "emulate")
    assert "initialised CUDA" in server.mismatch({**good, "cuda_initialized": True}, "emulate")
    assert "other files" in server.mismatch(
        {**good, "files": {**files, "graphsafe": "/elsewhere/graphsafe/__init__.py"}}, "emulate"
    )


CUDA_SCRIPT = """
import json
from graphsafe import CheckOptions
from graphsafe.frontend.inprocess import RunOptions
from graphsafe.frontend.sandbox import Sandbox
out = {}
for target in ("tests.targets.synthetic:Safe", "tests.targets.broken:BreaksContextInCapture"):
    box = Sandbox(target, engine="cuda")
    opts = CheckOptions(engine="cuda", examples=3, probes=["stale-pointer", "capture-failure"], capture_sizes=[2])
    kinds = [sorted(box.check(opts, RunOptions(timeout=120)).kinds) for _ in range(2)]
    out[target] = {"kinds": kinds, "startups": box.startups, "inherited": box.inherited, "started": box.started}
    box.close()
print(json.dumps(out))
"""


@needs_cuda
def test_cuda_children_fork_from_a_server_without_cuda():
    proc = subprocess.run(
        [sys.executable, "-c", CUDA_SCRIPT], cwd=REPO, env=env_with_repo(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    safe, broken = out["tests.targets.synthetic:Safe"], out["tests.targets.broken:BreaksContextInCapture"]
    assert safe["kinds"] == [[], []] and safe["started"] == 1
    assert broken["kinds"] == [["capture-failure"], ["capture-failure"]] and broken["started"] == 2  # fresh after
    for box in (safe, broken):
        assert {s["method"] for s in box["startups"]} == {"forkserver"}, box["startups"]
        assert box["inherited"]["cuda_initialized"] is False and box["inherited"]["interpret"] is False


EARLY_SCRIPT = """
import json, sys
from multiprocessing import forkserver
from graphsafe.frontend.sandbox import server
server.start_early({guess!r})
started = {{"torch_imported": "torch" in sys.modules, "pid": forkserver._forkserver._forkserver_pid}}
from graphsafe.frontend.sandbox import Sandbox
box = Sandbox("tests.targets.synthetic:Safe", engine="emulate")
box.start(wait=True, timeout=120)
print(json.dumps({{**started, "method": box.startups[-1]["method"], "server_pid": box.inherited["pid"],
                  "interpret": box.inherited["interpret"]}}))
box.close()
"""


def _early(guess: str) -> dict:
    env = {k: v for k, v in env_with_repo().items() if k != "TRITON_INTERPRET"}  # the guess goes by the engine alone
    proc = subprocess.run(
        [sys.executable, "-c", EARLY_SCRIPT.format(guess=guess)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_server_started_early_runs_before_torch_is_imported_and_serves_the_first_child():
    out = _early("emulate")
    assert out["torch_imported"] is False and out["pid"] is not None
    assert out["method"] == "forkserver" and out["server_pid"] == out["pid"] and out["interpret"] is True


def test_a_server_started_on_a_wrong_engine_guess_is_replaced_before_the_first_child():
    out = _early("cuda")  # guessed CUDA; the child checks on the emulator
    assert out["method"] == "forkserver" and out["interpret"] is True
    assert out["server_pid"] != out["pid"]  # a new server, not the one started for CUDA


def test_pytest_starts_the_server_before_it_imports_torch(tmp_path):
    # a plugin loaded with -p (before graphsafe's first hook) says whether a server runs when torch is first imported
    (tmp_path / "torch_probe.py").write_text(
        "import sys\nfrom multiprocessing import forkserver\n"
        "class Probe:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch':\n"
        "            print('SERVER-AT-TORCH', forkserver._forkserver._forkserver_pid is not None, flush=True)\n"
        "            sys.meta_path.remove(self)\n"
        "        return None\n"
        "assert 'torch' not in sys.modules\n"
        "sys.meta_path.insert(0, Probe())\n"
    )
    env = env_with_repo()
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "torch_probe", "-p", "no:randomly", "-p", "no:cacheprovider"]
        + ["--graphsafe", SAFE, "--graphsafe-engine", "emulate", "--graphsafe-examples", "1", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SERVER-AT-TORCH True" in proc.stdout, proc.stdout

"""Isolation (graphsafe/frontend/sandbox/): one broken target must not take the run down with it.

The targets of ``tests/targets/broken.py`` crash their process (SIGSEGV), hang, or
raise; ``tests/targets/synthetic.py``'s safe targets must pass beside them, in the
same run, with every item accounted for.  Runs go to subprocesses (pytester,
the ``graphsafe`` command), because what is tested is what happens to a
process.  CUDA-only breakers (a capture that breaks the context, an illegal
address, a kernel that never ends) are skipped without a GPU.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import graphsafe
from graphsafe import CheckOptions, ContextBroken, ContractError, TargetCrashed, TargetTimeout, UsageError, check
from graphsafe.frontend.fixture import GraphsafeFixture
from graphsafe.frontend.inprocess import RunOptions
from graphsafe.frontend.sandbox import Sandbox, get_sandbox
from graphsafe.reports.atomic import OLD_PREFIX, TMP_PREFIX
from graphsafe.reports.paths import REPORT_FILES
from tests.subprocesses import OUTER_RUN_VARS, env_with_repo, failure_sections, plugin_args

needs_cuda = pytest.mark.cuda  # skipped where CUDA is not available (tests/conftest.py)

# tiny checks: seconds each
FAST = dict(examples=3, probes=["stale-pointer"], capture_sizes=[2])
FAST_ARGS = ["--graphsafe-examples", "3", "--graphsafe-probes", "stale-pointer", "--graphsafe-capture-sizes", "2"]


@pytest.fixture
def repo_importable(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory whose subprocesses import ``tests.targets.synthetic`` and ``tests.targets.broken`` from this repo."""
    monkeypatch.setenv("PYTHONPATH", env_with_repo()["PYTHONPATH"])
    for var in OUTER_RUN_VARS:
        monkeypatch.delenv(var, raising=False)
    return pytester


# -- a run with broken targets among safe ones -------------------------------------------------
BROKEN_RUN = [
    "--graphsafe",
    "tests.targets.synthetic:Safe",
    "--graphsafe",
    "tests.targets.broken:SegfaultsInPrepare",
    "--graphsafe",
    "tests.targets.broken:HangsInPrepare",
    "--graphsafe",
    "tests.targets.broken:RaisesInSetup",
    "--graphsafe",
    "tests.targets.synthetic:DeviceScale",
    "--graphsafe-timeout",
    "20",
]


def _item(target: str) -> str:
    return f"graphsafe[{target}]"


def in_box(box: Sandbox, timeout: float, **kw):
    """``box.check`` with the tiny options, ``kw`` on top, ``timeout`` seconds at most."""
    return box.check(CheckOptions(engine=box.engine, **{**FAST, **kw}), RunOptions(timeout=timeout))


class _Sessions:
    """pytest sessions run in subprocesses, all at once, each in its own directory.

    Started as soon as this module's first test runs (see ``_early_start``), so
    that their idle time (a hang waiting for its timeout) overlaps the other
    tests here; one xdist worker starts them (an exclusive lock file keyed by the
    run's id) and whichever runs the test that needs them reads the results.
    """

    def __init__(self, name: str, runs: dict[str, list[str]], files: dict[str, dict[str, str]] | None = None):
        run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
        self.root = Path(tempfile.gettempdir()) / f"graphsafe-{name}-{run_id}"
        self.runs = runs
        self.files = files or {}  # run -> {file name: text} written into its directory first
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(self.root / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return  # another worker runs them
        env = env_with_repo()
        for name, args in self.runs.items():
            d = self.root / name
            d.mkdir()
            for fname, text in self.files.get(name, {}).items():
                (d / fname).write_text(text)
            cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "--rootdir", str(d), *args]
            # a shell writes the exit status only once the session's output is complete
            script = f"{' '.join(map(shlex.quote, cmd))} >stdout 2>stderr </dev/null; echo $? >status"
            self.procs.append(subprocess.Popen(["sh", "-c", script], cwd=d, env=env, start_new_session=True))

    def results(self, timeout: float = 300) -> dict[str, pytest.RunResult]:
        self.start()  # a no-op when already started here or elsewhere
        deadline = time.monotonic() + timeout
        out = {}
        for name in self.runs:
            d = self.root / name
            while not (d / "status").exists() or not (d / "status").read_text().strip():
                assert time.monotonic() < deadline, f"pytest session {name} did not finish within {timeout} s"
                time.sleep(0.2)
            out[name] = pytest.RunResult(
                int((d / "status").read_text()),
                (d / "stdout").read_text().splitlines(),
                (d / "stderr").read_text().splitlines(),
                0.0,
            )
        return out

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()


# Without isolation, once a check breaks the CUDA context the remaining CUDA items fail fast.  On a
# CPU machine the conftest stands in for CUDA: every check counts as one on CUDA, and after a failed
# item the context reads as broken.
FAKE_BROKEN_CUDA = """
from graphsafe.frontend import runner

runner.uses_cuda = lambda engine: True
runner.cuda_context_ok = lambda: False
"""

BROKEN_SESSIONS = _Sessions(
    "isolation",
    {
        "xdist": ["-v", "--graphsafe-engine", "emulate", *FAST_ARGS, *BROKEN_RUN, "-n", "2"],
        "one-process": ["-v", "--graphsafe-engine", "emulate", *FAST_ARGS, *BROKEN_RUN],
        "no-isolation": [
            "-v",
            "--graphsafe-engine",
            "emulate",
            *FAST_ARGS,
            "--graphsafe-isolate",
            "none",
            "--graphsafe",
            "tests.targets.synthetic:FreshLens",
            "--graphsafe",
            "tests.targets.synthetic:Safe",
        ],
    },
    files={"no-isolation": {"conftest.py": FAKE_BROKEN_CUDA}},
)


@pytest.fixture(scope="module", autouse=True)
def _early_start(request):
    """Start the pytest sessions of ``test_broken_targets_fail_alone_and_nothing_is_lost`` at once."""
    if any(
        getattr(it, "originalname", None) == "test_broken_targets_fail_alone_and_nothing_is_lost"
        for it in request.session.items
    ):
        BROKEN_SESSIONS.start()
    yield
    # the sessions this worker started end before it does (the test reading them may run elsewhere)
    try:
        for p in BROKEN_SESSIONS.procs:
            p.wait(timeout=300)
    finally:
        BROKEN_SESSIONS.stop()


# -- the Sandbox API -------------------------------------------------------------------------
def test_crash_raises_and_the_next_check_gets_a_fresh_process(tmp_path, monkeypatch):
    marker = tmp_path / "crashed"
    monkeypatch.setenv("GRAPHSAFE_CRASH_ONCE", str(marker))  # the child inherits it
    box = Sandbox("tests.targets.broken:CrashesOnce", engine="emulate")
    try:
        with pytest.raises(TargetCrashed) as info:
            in_box(box, 60)
        e = info.value
        assert e.exitcode == -signal.SIGSEGV and e.exit_code == 3
        assert str(e).startswith(
            "tests.targets.broken:CrashesOnce: the target crashed its process (SIGSEGV): "
            "an illegal memory access or a bad pointer"
        )
        assert e.where.startswith("tests/targets/broken.py:") and e.where.endswith(" in prepare")
        assert marker.exists() and not box.alive
        result = in_box(box, 60)  # a fresh process; the target no longer crashes
        assert result.ok and result.examples >= 1 and box.started == 2
    finally:
        box.close()


def test_a_hang_is_stopped_at_the_timeout_and_its_process_killed():
    box = Sandbox("tests.targets.broken:HangsInPrepare", engine="emulate")
    try:
        box.start(wait=True, timeout=60)  # the child's start-up (importing torch) is not part of the check's time
        pid = box.pid
        with pytest.raises(TargetTimeout) as info:
            in_box(box, 5)
        assert info.value.timeout == 5
        assert str(info.value) == (
            "tests.targets.broken:HangsInPrepare: no result within 5 s: the target hangs (an endless loop or kernel, "
            "or a blocking call), or the check needs more time (shrinking a failure runs it hundreds of times: raise "
            "the timeout); its process was killed; "
            f"it was in {info.value.where}"
        )
        assert re.fullmatch(r"tests/targets/broken\.py:\d+ in prepare", info.value.where)
        assert not box.alive
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped
    finally:
        box.close()


def test_result_equals_the_in_process_result():
    from tests.targets.synthetic import FreshLens

    kwargs = dict(FAST, seed=3, probes=["stale-pointer", "unpersisted-metadata"])
    here = check("tests.targets.synthetic:FreshLens", engine="emulate", **kwargs)
    box = get_sandbox("tests.targets.synthetic:FreshLens", engine="emulate")
    there = in_box(box, 60, **kwargs)
    assert there.kinds == here.kinds == {"stale-pointer"}
    assert (there.target, there.engine, there.spec, there.probes) == (here.target, here.engine, here.spec, here.probes)
    assert [(f.kind, f.where, f.probe, f.capture_size) for f in there.findings] == [
        (f.kind, f.where, f.probe, f.capture_size) for f in here.findings
    ]
    assert there.findings[0].capture_batch == here.findings[0].capture_batch
    assert "freed after capture" in there.findings[0].message
    # one process per (target, engine, device), reused by every check; a class goes by its name
    assert (
        get_sandbox("tests.targets.synthetic:FreshLens", engine="emulate")
        is box
        is get_sandbox(FreshLens, engine="emulate")
    )
    pid = box.pid
    spec = graphsafe.CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, block_size=4)
    small = in_box(box, 60, spec=spec, examples=2, capture_sizes=[1])
    assert small.spec == spec and small.kinds == {"stale-pointer"} and box.pid == pid
    # contract and argument errors come back as what they are, with the same message, and cost nothing
    with pytest.raises(ContractError) as here:
        check("tests.targets.synthetic:FreshLens", engine="emulate", spec="small", **FAST)
    assert str(here.value) == "spec must be a graphsafe.CaptureSpec, got str"
    with pytest.raises(UsageError, match=r"capture size 9 must be an int in \[1, spec.max_reqs=4\]"):
        in_box(box, 60, examples=1, capture_sizes=[9])
    with pytest.raises(UsageError, match="this sandbox runs engine 'emulate'; the check asked for 'cuda'"):
        box.check(CheckOptions(engine="cuda"), RunOptions(timeout=60))
    assert box.pid == pid and box.alive


def test_fixture_isolates_on_request():
    fixture = GraphsafeFixture({"engine": "emulate", "isolate": "target", "timeout": 60, **FAST})
    with pytest.raises(pytest.fail.Exception) as info:  # findings fail the test, as in-process
        fixture.check("tests.targets.synthetic:FreshLens")
    assert "tests.targets.synthetic:FreshLens on emulate: stale-pointer" in str(info.value)
    assert get_sandbox("tests.targets.synthetic:FreshLens", engine="emulate").alive  # it ran there
    with pytest.raises(pytest.fail.Exception) as info:  # a crash fails the test with one line
        fixture.check("tests.targets.broken:SegfaultsInPrepare")
    msg = str(info.value)
    assert msg.startswith(
        "graphsafe: tests.targets.broken:SegfaultsInPrepare: the target crashed its process (SIGSEGV)"
    )
    assert "\n" not in msg and "other targets were not affected" in msg
    with pytest.raises(pytest.fail.Exception, match="unknown isolation 'yes'"):
        GraphsafeFixture({"isolate": "yes"}).check("tests.targets.synthetic:Safe")


def test_a_class_defined_in_a_function_runs_here_with_a_note():
    from tests.targets.synthetic import Safe

    class Local(Safe):
        pass

    box = get_sandbox(Local, engine="emulate")
    result = in_box(box, 60)
    assert result.ok and box.pid is None
    assert any(
        "is defined inside a function, so a sandbox process cannot import it; it ran in this process" in n
        for n in result.notes
    ), result.notes


def test_cli_isolate_marks_crash_and_timeout_rows_and_goes_on(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphsafe",
            "check",
            "tests.targets.broken:SegfaultsInPrepare",
            "tests.targets.broken:HangsInPrepare",
            "--engine",
            "emulate",
            "--examples",
            "3",
            "--probes",
            "stale-pointer",
            "--capture-sizes",
            "2",
            "--isolate",
            "--timeout",
            "5",
        ],
        cwd=tmp_path,
        env=env_with_repo(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 3, proc.stderr  # a target failed to run
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()[2:]}
    assert rows == {  # the crash did not stop the run: the next target was checked (and hung)
        "tests.targets.broken:SegfaultsInPrepare": ["-", "CRASH"],
        "tests.targets.broken:HangsInPrepare": ["-", "TIMEOUT"],
    }, proc.stdout
    assert (
        "graphsafe: tests.targets.broken:SegfaultsInPrepare: the target crashed its process (SIGSEGV): an illegal "
        "memory access or a bad pointer"
    ) in proc.stderr
    assert "graphsafe: tests.targets.broken:HangsInPrepare: no result within 5 s: the target hangs" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- an interrupted run leaves whole reports and an intact database ----------------------------------
INTERRUPTED = [
    "tests.targets.synthetic:FreshLens",
    "tests.targets.synthetic:NewMetadata",
    "tests.targets.synthetic:StaleTail",
    "tests.targets.synthetic:Counter",
    "tests.targets.synthetic:HostScale",
]


def _reports_whole(root: Path) -> list[Path]:
    """Every report directory under root (asserting each holds all four files); temporary leftovers allowed."""
    whole = []
    if not root.exists():
        return whole
    for target_dir in root.iterdir():
        assert target_dir.is_dir(), target_dir
        for d in target_dir.iterdir():
            if d.name.startswith(TMP_PREFIX):
                continue  # an interrupted write: never under a report's own name
            assert sorted(p.name for p in d.iterdir()) == sorted(REPORT_FILES), d
            if not d.name.startswith(OLD_PREFIX):
                whole.append(d)
    return whole


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL-isolated"])
def test_interrupted_run_leaves_no_partial_report(tmp_path, how):
    reports, db = tmp_path / "reports", tmp_path / "db"
    env = dict(env_with_repo(), GRAPHSAFE_DB=str(db))
    cmd = [
        sys.executable,
        "-m",
        "graphsafe",
        "check",
        *INTERRUPTED,
        "--engine",
        "emulate",
        "--examples",
        "40",
        "--steps",
        "3",
        "--capture-sizes",
        "2",
        "--report-dir",
        str(reports),
    ]
    if how.endswith("isolated"):
        cmd.append("--isolate")
    # the child starts with Ctrl-C's default action, as from a terminal (not this worker's disposition)
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while not _reports_whole(reports) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted: " + proc.stderr.read()
        proc.send_signal(signal.SIGKILL if how.startswith("SIGKILL") else signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if how.startswith("SIGKILL"):
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130, err
        assert "graphsafe: interrupted" in err and "Traceback" not in err
        assert not any(p.name.startswith(TMP_PREFIX) for p in reports.rglob("*"))  # cleaned up on the way out
    assert _reports_whole(reports)
    assert db.is_dir() and any(p.is_file() for p in db.rglob("*"))  # the checks that finished saved theirs
    if how == "SIGINT":
        return
    # the database is still usable: a complete run over it finds the bug again and keeps its entries
    rest = [a for a in cmd[4 + len(INTERRUPTED) :] if a != "--isolate"]
    done = subprocess.run(
        [*cmd[:4], "tests.targets.synthetic:FreshLens", *rest],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 1, done.stderr
    assert any(p.is_file() for p in db.rglob("*"))
    assert _reports_whole(reports)


# -- the run with broken targets among safe ones (started early, read last) --------------------------
def test_broken_targets_fail_alone_and_nothing_is_lost():
    results = BROKEN_SESSIONS.results()
    _assert_broken_run(results["xdist"], xdist=True)
    _assert_broken_run(results["one-process"], xdist=False)
    # without isolation: the item that broke the (stand-in) CUDA context fails with its finding, the
    # next one fails fast naming it
    result = results["no-isolation"]
    result.assert_outcomes(failed=2)
    assert "no isolation" in result.stdout.str()
    sections = failure_sections(result)
    assert "stale-pointer: the graph reads freed memory" in sections[_item("tests.targets.synthetic:FreshLens")]
    assert sections[_item("tests.targets.synthetic:Safe")] == (
        "graphsafe: tests.targets.synthetic:Safe: CUDA context broken by tests.targets.synthetic:FreshLens; rerun with "
        "isolation (--isolate, --graphsafe-isolate target)"
    )
    shutil.rmtree(BROKEN_SESSIONS.root, ignore_errors=True)


def _assert_broken_run(result: pytest.RunResult, xdist: bool) -> None:
    out = result.stdout.str()
    # every item ran and reported: 2 safe targets passed, 3 broken ones failed, nothing lost
    result.assert_outcomes(passed=2, failed=3)
    assert ("2 workers [5 items]" if xdist else "collected 5 items") in out
    assert "one process per target (timeout 20s)" in out
    for safe in ("tests.targets.synthetic:Safe", "tests.targets.synthetic:DeviceScale"):
        assert re.search(rf"{re.escape(_item(safe))} PASSED|PASSED.*{re.escape(_item(safe))}", out), out
    sections = failure_sections(result)
    assert sorted(sections) == sorted(
        _item(t)
        for t in (
            "tests.targets.broken:SegfaultsInPrepare",
            "tests.targets.broken:HangsInPrepare",
            "tests.targets.broken:RaisesInSetup",
        )
    )

    crash = sections[_item("tests.targets.broken:SegfaultsInPrepare")]
    assert crash.startswith(
        "graphsafe: tests.targets.broken:SegfaultsInPrepare: "
        "the target crashed its process (SIGSEGV): an illegal memory access or a bad pointer"
    ), crash
    assert re.search(r"; last Python frame: \S*tests/targets/broken\.py:\d+ in prepare\. ", crash), crash
    assert "other targets were not affected" in crash
    assert "\n" not in crash  # one paragraph, no traceback

    hang = sections[_item("tests.targets.broken:HangsInPrepare")]
    assert hang.startswith(
        "graphsafe: tests.targets.broken:HangsInPrepare: no result within 20 s: "
        "the target hangs (an endless loop or kernel, or a blocking call), or the check needs more time (shrinking a "
        "failure runs it hundreds of times: raise the timeout); its process was killed"
    ), hang
    assert re.search(r"; it was in \S*tests/targets/broken\.py:\d+ in prepare\. ", hang), hang
    assert "\n" not in hang

    raises = sections[_item("tests.targets.broken:RaisesInSetup")]
    # the first line names the kind and the cause (what pytest's short summary shows), then the check's header
    assert re.match(
        r"target-error: line:\S*tests/targets/broken\.py:\d+ in setup\n"
        r"tests\.targets\.broken:RaisesInSetup on emulate at Support\.",
        raises,
    ), raises
    assert "target-error: setup(spec, device) raised RuntimeError: setup is broken on purpose" in raises
    assert "Traceback" not in out and "Fatal Python error" not in out


# -- CUDA: breakers that only a GPU can show ------------------------------------------------------
CUDA_RUN = [
    "--graphsafe",
    "tests.targets.synthetic:Safe",
    "--graphsafe",
    "tests.targets.broken:BreaksContextInCapture",
    "--graphsafe",
    "tests.targets.broken:IllegalAccessOnReplay",
    "--graphsafe",
    "tests.targets.broken:HangsOnReplay",
    "--graphsafe",
    "tests.targets.synthetic:DeviceScale",
    "--graphsafe-timeout",
    "20",
]


@needs_cuda
def test_cuda_breakers_fail_alone():
    common = ["-v", "--graphsafe-engine", "cuda", *FAST_ARGS, *CUDA_RUN]
    sessions = _Sessions("isolation-cuda", {"xdist": [*common, "-n", "2"], "one-process": common})
    try:
        results = sessions.results()
    finally:
        sessions.stop()
    shutil.rmtree(sessions.root, ignore_errors=True)
    for result in results.values():
        result.assert_outcomes(passed=2, failed=3)
        sections = failure_sections(result)
        capture = sections[_item("tests.targets.broken:BreaksContextInCapture")]
        assert "capture-failure" in capture
        illegal = sections[_item("tests.targets.broken:IllegalAccessOnReplay")]
        assert "\n" not in illegal and "other targets were not affected" in illegal
        assert re.search("CUDA context (was|became) unusable|crashed its process", illegal), illegal
        hang = sections[_item("tests.targets.broken:HangsOnReplay")]
        assert "no result within 20 s: the target hangs" in hang and "\n" not in hang


@needs_cuda
def test_cuda_without_isolation_fails_the_rest_fast(repo_importable):
    result = repo_importable.runpytest_subprocess(
        *plugin_args(),
        "-p",
        "no:cacheprovider",
        "-v",
        "--graphsafe-engine",
        "cuda",
        "--graphsafe-isolate",
        "none",
        *FAST_ARGS,
        "--graphsafe",
        "tests.targets.broken:BreaksContextInCapture",
        "--graphsafe",
        "tests.targets.synthetic:Safe",
        timeout=300,
    )
    result.assert_outcomes(failed=2)
    sections = failure_sections(result)
    assert sections[_item("tests.targets.synthetic:Safe")] == (
        "graphsafe: tests.targets.synthetic:Safe: CUDA context broken by tests.targets.broken:BreaksContextInCapture; "
        "rerun with isolation (--isolate, --graphsafe-isolate target)"
    )


@needs_cuda
def test_cli_isolates_each_target_on_cuda_by_default_so_a_crash_spares_the_next_target(tmp_path):
    # no --isolate: on the cuda engine graphsafe check isolates by default; without it the illegal
    # access would break the process's CUDA context and Safe would get no verdict
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphsafe",
            "check",
            "tests.targets.broken:IllegalAccessOnReplay",
            "tests.targets.synthetic:Safe",
            "--engine",
            "cuda",
            "--examples",
            "3",
            "--probes",
            "stale-pointer",
            "--capture-sizes",
            "2",
            "--timeout",
            "120",
        ],
        cwd=tmp_path,
        env=env_with_repo(),
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 3, proc.stderr  # a target failed to run, and nothing worse
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()[2:] if line.strip()}
    assert rows["tests.targets.broken:IllegalAccessOnReplay"] == ["-", "CRASH"], proc.stdout
    assert rows["tests.targets.synthetic:Safe"] == ["ok", "ok"], proc.stdout  # its verdict, in a fresh process
    assert "CUDA context broken by" not in proc.stderr


def test_cli_check_on_the_emulator_runs_in_process_by_default_and_isolates_on_request():
    # the default follows the engine (no CUDA context to lose on the emulator); both flags override it
    from graphsafe.frontend import cli
    from graphsafe.frontend.options import resolve

    parser = cli.build_parser()
    for flags, isolate in [([], "none"), (["--isolate"], "target"), (["--no-isolate"], "none")]:
        args = parser.parse_args(["check", "tests.targets.synthetic:Safe", "--engine", "emulate", *flags])
        assert resolve(cli._given(args, ("engine",)), "cli").run.isolate == isolate, flags


@needs_cuda
def test_cuda_sandbox_reports_a_broken_context_and_starts_afresh():
    box = Sandbox("tests.targets.broken:BreaksContextInCapture", engine="cuda")
    try:
        result = in_box(box, 120)
        assert result.kinds == {"capture-failure"}
        assert any("CUDA context unusable" in n for n in result.notes), result.notes
        assert not box.alive  # discarded: the next check starts a fresh process
        assert in_box(box, 120).kinds == {"capture-failure"} and box.started == 2
    finally:
        box.close()
    with pytest.raises(ContextBroken, match="CUDA context became unusable") as info:
        in_box(get_sandbox("tests.targets.broken:IllegalAccessOnReplay", engine="cuda"), 120)
    assert info.value.steps and 0 <= info.value.step < len(info.value.steps)  # the example and the faulting step


@needs_cuda
def test_cuda_item_in_capture_is_stopped_before_the_driver_and_the_process_is_kept():
    box = Sandbox("tests.targets.broken:ItemOnlyInCapture", engine="cuda")
    try:
        result = in_box(box, 120)
        assert result.kinds == {"capture-failure"}
        assert not any("unusable" in n for n in result.notes), result.notes
        assert box.alive  # the context is fine: the process serves the next check
        assert in_box(box, 120).kinds == {"capture-failure"} and box.started == 1
    finally:
        box.close()

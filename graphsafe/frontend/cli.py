"""The ``graphsafe`` command: check targets without pytest, list targets, rerun a report.

::

    graphsafe check TARGET... [--engine E] [--examples N] [--steps N] [--probes P1,P2]
                              [--capture-sizes 1,2,4] [--report-dir DIR] [--seed S] [--profile P]
                              [--isolate | --no-isolate] [--timeout SECONDS] [--jobs K] [--shard K/N]
                              [--database DB] [--expected] [--debug]
    graphsafe audit TARGET... [--engine E] [--examples N] [--capture worst,minimal] [--report-dir DIR]
    graphsafe list
    graphsafe repro PATH [--engine E] [--timeout SECONDS]

``check`` runs every target once with every selected probe and prints a table: one row per
target, one column per probe, a cell is ``ok``, the kind of the finding that probe made, or
``not reached`` (an earlier finding ended the search first).  Findings no single probe owns
(``target-error``, ``replay-mismatch``) go to the last column, ``other``; ``CRASH``, ``TIMEOUT``
and ``ERROR`` rows are targets that could not be checked.  Then each finding's summary.
Progress goes to stderr.

On the cuda engine (``auto`` with a GPU visible included) each target is checked in a process of its
own unless ``--no-isolate`` says otherwise: a device-side assert or an illegal access breaks the whole
process's CUDA context, and every later target with it.  Options are resolved by
:func:`graphsafe.frontend.options.resolve`, as every front end's.

Exit status (the highest that applies to any target): 0 no findings, 1 findings, 2 a usage or
contract error, 3 a target failed to run (raised, crashed, timed out, ran out of memory), 4 an
internal error of graphsafe (printed with its traceback; ``--debug`` shows tracebacks for the
others too).  With ``--expected`` each registered target's findings are compared with its
``expected`` attribute instead: 0 when every verdict is the expected one, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

from .. import defaults
from ..checker import CheckOptions, lookup, names, resolve_target, validate_target
from ..checker.audit import AUDIT_CAPTURE
from ..checker.families import families
from ..diagnosis import PROBES
from ..engines import ENGINES
from ..errors import (
    EXIT_FINDINGS,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    GraphsafeError,
    TargetFailure,
    UsageError,
    exit_code,
    internal,
)
from ..findings import CheckResult
from ..reports import repro_main
from ..reports.jsonio import read_data
from . import console, schedule, threads
from . import options as o
from .devices import engine_problem, prepare_engine
from .jobs import parse_jobs, run_parallel
from .options import RunOptions
from .parser import build_parser
from .runner import audit, run
from .sandbox import close_all, get_sandbox, warm
from .sandbox.child import preload_of

__all__ = ["main", "build_parser"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as e:  # argparse: usage errors exit 2, --help/--version 0
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_USAGE)
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "list":
            return _list()
        if args.command == "audit":
            return _audit(args)
        return _repro(args)
    except UsageError as e:
        return _usage(str(e))
    except BaseException as e:
        if _interrupted(e):
            print("graphsafe: interrupted", file=sys.stderr)
            return 130
        if not isinstance(e, Exception):
            raise
        err = e if isinstance(e, GraphsafeError) else internal(e)
        print(
            getattr(err, "traceback", "") or "".join(traceback.format_exception(type(e), e, e.__traceback__)),
            file=sys.stderr,
        )
        print(f"graphsafe: error: {o.one_line(err)}", file=sys.stderr)
        return exit_code(err)


def _interrupted(e: BaseException) -> bool:
    """A KeyboardInterrupt, or an error raised while handling one.

    Hypothesis turns a Ctrl-C that arrives before its engine has started into an
    ``AssertionError`` raised while handling the KeyboardInterrupt.
    """
    seen = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _usage(msg: str) -> int:
    print(f"graphsafe: error: {o.one_line(msg)}", file=sys.stderr)
    return EXIT_USAGE


# -- check -------------------------------------------------------------------------------------
def _given(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, o.Given]:
    """The options given on the command line, as text (``--isolate``/``--no-isolate`` as a mode)."""
    out = {
        n: o.Given(getattr(args, n), "--" + n.replace("_", "-"), text=True)
        for n in names
        if getattr(args, n, None) is not None
    }
    if args.isolate is not None:
        out["isolate"] = o.Given("target" if args.isolate else "none", "--isolate" if args.isolate else "--no-isolate")
    return out


def _engine(args: argparse.Namespace) -> str:
    return o.parse_engine(args.engine if args.engine is not None else defaults.ENGINE, "--engine")


def _check(args: argparse.Namespace) -> int:
    # torch warns on every CUDA pre-screen that sync debug mode is a prototype; it would split
    # the progress lines and says nothing about the target
    warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype feature")
    if os.getcwd() not in sys.path:  # 'graphsafe check mymod:Cls' from mymod's folder, as 'python -m' does
        sys.path.insert(0, os.getcwd())
    engine = _engine(args)
    prepare_engine(engine)  # before any target (and its kernels) is imported
    problem = engine_problem(engine)
    if problem:
        return _usage(problem)
    resolved = o.resolve(
        _given(
            args,
            (
                "engine",
                "examples",
                "steps",
                "seed",
                "capture_sizes",
                "probes",
                "capture",
                "timeout",
                "report_dir",
                "profile",
                "database",
            ),
        ),
        "cli",
    )
    check, run_opts = resolved.check, resolved.run
    shard = o.parse_shard(args.shard, "--shard")
    targets = o.expand_targets(args.targets)
    if not targets:
        return _usage("no targets registered ('all' matched nothing)")
    classes: dict[str, type] = {}
    for name in targets:  # resolve everything first: a typo fails before minutes of checking
        try:
            cls, _ = resolve_target(name)
            validate_target(cls)
        except GraphsafeError as e:
            return _error_exit(e, args.debug)
        classes[name] = cls
    if shard is not None:  # no durations here: each target's kind stands in for its length
        targets = schedule.shard(targets, {t: schedule.kind_of(t) for t in targets}, {}, *shard)
        if not targets:
            print(f"graphsafe: shard {shard[0]}/{shard[1]} holds no target", file=sys.stderr)
            return EXIT_OK
    return _run_all(targets, classes, check, run_opts, args)


def _error_exit(e: GraphsafeError, debug: bool) -> int:
    if debug:
        traceback.print_exception(type(e), e, e.__traceback__)
    return _usage(str(e))


def _run_all(
    targets: list[str], classes: dict[str, type], check: CheckOptions, run_opts: RunOptions, args: argparse.Namespace
) -> int:
    columns = list(check.probes or PROBES) + [console.OTHER]
    engine = o.engine_name(check)
    jobs = parse_jobs(args.jobs, engine, run_opts.isolate)
    threads.set_jobs(min(jobs, len(targets)))  # each sandbox's torch threads: the cores shared by the jobs
    latch = _InterruptLatch()
    if run_opts.isolate == "target":  # the fork server imports every target's library once (vLLM: seconds)
        warm(engine, preload=tuple(m for c in classes.values() for m in preload_of(c)))

    def one(i: int, device: int | None) -> tuple[tuple[str, dict[str, str]], CheckResult | None, int]:
        return _check_one(targets, i, classes, check, run_opts, columns, args.debug, device, parallel=jobs > 1)

    try:
        if jobs > 1:
            outcomes = run_parallel(len(targets), one, jobs, engine, latch.check)
        else:
            outcomes = []
            for i in range(len(targets)):
                latch.check()
                if run_opts.isolate == "target" and i + 1 < len(targets):  # the next target's process starts now
                    get_sandbox(classes[targets[i + 1]], engine=engine).start(wait=False)
                outcomes.append(one(i, None))
        latch.check()
    finally:
        latch.close()
        if run_opts.isolate == "target":
            close_all()
    rows = [row for row, _, _ in outcomes]
    results = {name: result for (name, _), result, _ in outcomes if result is not None}
    print(console.table(rows, columns))
    console.print_findings(results.values())
    if args.expected:
        return _expected_status(targets, classes, results)
    return max((status for _, _, status in outcomes), default=EXIT_OK)


def _check_one(
    targets: list[str],
    i: int,
    classes: dict[str, type],
    check: CheckOptions,
    run_opts: RunOptions,
    columns: list[str],
    debug: bool,
    device: int | None,
    parallel: bool,
) -> tuple[tuple[str, dict[str, str]], CheckResult | None, int]:
    """Check ``targets[i]``: its table row, its result (None when it could not be checked) and its exit status.
    Progress goes to stderr: a header and a progress bar, or (``parallel``) one line when the check ends."""
    name, n = targets[i], len(targets)
    tag = f"[{i + 1}/{n}] {name}" + (f" (GPU {device})" if parallel and device is not None else "")
    if not parallel:
        print(f"[{i + 1}/{n}] {console.header(name, classes[name], check)}", file=sys.stderr, flush=True)
        print(f"{tag} ... ", end="", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        if parallel:
            result = run(classes[name], check, run_opts, label=name, device=device)
        else:
            with console.ProgressBar(name) as bar:
                result = run(classes[name], check, run_opts, label=name, progress=bar.update)
    except Exception as e:  # noqa: BLE001 - one target's error never ends the run
        if _interrupted(e):
            raise
        e = e if isinstance(e, GraphsafeError) else internal(e)  # graphsafe's own bug: exit 4
        row = (name, console.failed_cells(e, columns))
        mark = row[1][console.OTHER]
        text = o.one_line(e)
        text = text if text.startswith(f"{name}: ") else f"{name}: {text}"
        lead = "graphsafe: " if isinstance(e, TargetFailure) else "graphsafe: error: "
        done = f"{mark.lower()} ({time.perf_counter() - t0:.1f}s)"
        lines = [f"{tag}: {done}" if parallel else done, f"{lead}{text}; the run goes on"]
        if debug or exit_code(e) == EXIT_INTERNAL:
            lines.append(
                getattr(e, "traceback", "") or "".join(traceback.format_exception(type(e), e, e.__traceback__))
            )
        print("\n".join(lines), file=sys.stderr, flush=True)
        return row, None, exit_code(e)
    kinds = ", ".join(sorted(result.kinds)) or "ok"
    done = f"{kinds} ({result.seconds:.1f}s)"
    print(f"{tag}: {done}" if parallel else done, file=sys.stderr, flush=True)
    return (name, console.cells(result, columns)), result, exit_code(result)


def _expected_status(targets: list[str], classes: dict[str, type], results: dict[str, CheckResult]) -> int:
    """With ``--expected``: 0 when every target got exactly its ``expected`` kind (None: no finding)."""
    wrong = []
    for name in targets:
        want = getattr(classes[name], "expected", None)
        want_kinds = {getattr(want, "value", want)} if want else set()
        got = results[name].kinds if name in results else {"(could not be checked)"}
        if got != want_kinds:
            wrong.append(
                f"{name}: expected {', '.join(sorted(want_kinds)) or 'no finding'}, "
                f"got {', '.join(sorted(got)) or 'no finding'}"
            )
    print()
    print(f"{len(targets) - len(wrong)} of {len(targets)} as expected")
    for line in wrong:
        print(f"  {line}")
    return 0 if not wrong else 1


class _InterruptLatch:
    """Remembers a Ctrl-C, so that the run stops at the next target even when the
    KeyboardInterrupt itself was swallowed (one that lands in a garbage-collector
    callback, Hypothesis has one, is only printed by Python, never raised).  Such a
    swallowed interrupt is not printed either (a traceback for a Ctrl-C that worked):
    every other unraisable exception goes to the hook there was before."""

    def __init__(self) -> None:
        self.hit = False
        self._prev: Any = None
        self._prev_hook: Any = None
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        ):
            self._prev = signal.signal(signal.SIGINT, self._handle)
            self._prev_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable

    def _unraisable(self, info: Any) -> None:
        if isinstance(info.exc_value, KeyboardInterrupt) and self.hit:
            return  # remembered: the run stops at the next target
        self._prev_hook(info)

    def _handle(self, signum: int, frame: Any) -> None:
        self.hit = True
        if callable(self._prev) and self._prev is not signal.default_int_handler:
            self._prev(signum, frame)
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt

    def close(self) -> None:
        if self._prev is not None:
            signal.signal(signal.SIGINT, self._prev)
            self._prev = None
        if self._prev_hook is not None:
            sys.unraisablehook, self._prev_hook = self._prev_hook, None


# -- audit -------------------------------------------------------------------------------------
def _audit(args: argparse.Namespace) -> int:
    engine = _engine(args)
    prepare_engine(engine)
    problem = engine_problem(engine)
    if problem:
        return _usage(problem)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    capture = o.parse_capture(args.capture, "--capture") or AUDIT_CAPTURE
    given = _given(args, ("engine", "examples", "seed", "timeout"))
    resolved = o.resolve({**given, "database": o.Given(False, "database")}, "cli-audit")
    opts, timeout, isolate = resolved.check, resolved.run.timeout, resolved.run.isolate
    names_ = o.expand_targets(args.targets)
    classes = {}
    for name in names_:
        try:
            classes[name] = resolve_target(name)[0]
            validate_target(classes[name])
        except GraphsafeError as e:
            return _error_exit(e, False)
    status = EXIT_OK
    for i, name in enumerate(names_, 1):
        print(f"[{i}/{len(names_)}] auditing {name} under {','.join(capture)} capture ...", file=sys.stderr, flush=True)
        try:
            result = audit(
                classes[name], opts, capture=capture, report_dir=args.report_dir, isolate=isolate, timeout=timeout
            )
        except GraphsafeError as e:
            print(f"graphsafe: error: {name}: {o.one_line(e)}", file=sys.stderr)
            status = max(status, exit_code(e))
            continue
        console.print_audit(result)
        status = max(status, EXIT_OK if result.ok else EXIT_FINDINGS)
    return status


# -- list --------------------------------------------------------------------------------------
def _list() -> int:
    prepare_engine("auto")  # listing imports the reference kernels
    others = families(in_all=False)
    all_names, extra = names(), [n for f in others for n in f.names()]
    width = max((len(n) for n in all_names + extra), default=0)
    for name in all_names + extra:
        try:
            cls = lookup(name)
        except Exception as e:  # noqa: BLE001 - one broken target must not hide the others
            desc, has_expected, expected = f"(cannot load: {o.one_line(e)})", False, None
        else:
            desc, has_expected, expected = first_sentence(cls), hasattr(cls, "expected"), getattr(cls, "expected", None)
        line = f"{name.ljust(width)}  {desc}".rstrip()
        if has_expected:
            line += f"  [expected: {getattr(expected, 'value', expected) or 'ok'}]"
        print(line)
    print()
    for fam in others:
        missing = fam.requirement()
        print(
            f"the {fam.prefix}:* targets (group '{fam.prefix}', not in 'all') "
            + (f"cannot run here: {missing}" if missing else "can run here")
        )
    for fam in others:
        if fam.also:
            print(fam.also)
    return 0


def first_sentence(cls: type) -> str:
    """The first sentence of the class's own docstring, as plain text ('' when it has none)."""
    doc = " ".join((cls.__dict__.get("__doc__") or "").split())
    doc = doc.replace("``", "").replace(":class:", "").replace(":func:", "").replace(":meth:", "").replace("`", "")
    end = doc.find(". ")
    return doc if end < 0 else doc[: end + 1]


# -- repro -------------------------------------------------------------------------------------
def _recorded_engine(path: str) -> str:
    """The engine a report recorded (so an emulator report gets the Triton interpreter), else auto."""
    try:
        engine = read_data(path).get("engine")
    except (OSError, ValueError):  # repro_main reports unreadable reports itself
        return "auto"
    return engine if engine in ENGINES else "auto"


def _repro(args: argparse.Namespace) -> int:
    engine = None if args.engine is None else o.parse_engine(args.engine, "--engine")
    timeout = defaults.TIMEOUT_S if args.timeout is None else o.parse_timeout(args.timeout, "--timeout")
    prepare_engine(engine or _recorded_engine(args.path))
    return int(repro_main(args.path, engine, timeout=timeout))


if __name__ == "__main__":
    sys.exit(main())

"""The ``graphsafe`` command: check targets without pytest, list targets, rerun a report.

::

    graphsafe check TARGET... [--engine E] [--examples N] [--steps N] [--probes P1,P2]
                              [--capture-sizes 1,2,4] [--report-dir DIR] [--seed S] [--profile P]
                              [--isolate] [--timeout SECONDS]
    graphsafe list
    graphsafe repro PATH [--engine E]

``check`` runs :func:`graphsafe.check` once per target with every selected
probe and prints a table: one row per target, one column per probe, a cell is
``ok`` or the kind of the finding that probe made.  Findings no single probe
owns (``target-error``, ``replay-mismatch``) go to the last column, ``other``.
A ``-`` means nothing ran (capture failed or the target raised first).  Then
each finding's summary.  Progress goes to stderr.

With ``--isolate`` each target is checked in a process of its own: a target
that crashes its process (a segfault, a broken CUDA context) or gives no
result within ``--timeout`` seconds (default 600; ``--timeout`` implies
``--isolate``) gets a row marked ``CRASH`` or ``TIMEOUT`` and the run goes on.

Exit status: 0 nothing found, 1 an error-severity finding or a target that
crashed or timed out, 2 usage error or a target that cannot be checked
(unknown, does not import, breaks the contract).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
import warnings
from typing import Any, Sequence

from ._internal import frontend
from ._internal.frontend import ConfigError

__all__ = ["main", "build_parser"]

OTHER = "other"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="graphsafe",
        description="Find CUDA-graph capture hazards in attention backends and GPU kernels.",
    )
    from . import __version__

    p.add_argument("--version", action="version", version=f"graphsafe {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    c = sub.add_parser("check", help="check targets and print a table of findings",
                       description="Capture each TARGET, replay drawn step sequences and report hazards.")
    c.add_argument("targets", nargs="+", metavar="TARGET",
                   help="'module:Class', a registered name (see 'graphsafe list'), or 'all'")
    c.add_argument("--engine", default="auto", help="auto (default), cuda or emulate")
    c.add_argument("--examples", default=None, metavar="N",
                   help="Hypothesis examples per target (default: the checker's 50, or the --profile's)")
    c.add_argument("--steps", default=None, metavar="N", help="most batches per step sequence (default 4)")
    c.add_argument("--probes", default=None, metavar="P1,P2", help="probes to run (default: all default probes)")
    c.add_argument("--capture-sizes", default=None, metavar="1,2,4", help="capture sizes (default: the target's)")
    c.add_argument("--report-dir", default=None, metavar="DIR", help="write a report for each finding under DIR")
    c.add_argument("--seed", default=None, metavar="S", help="Hypothesis seed")
    c.add_argument("--profile", default=None, metavar="P",
                   help="Hypothesis profile: fast, ci or thorough (default: Hypothesis' current settings)")
    c.add_argument("--isolate", action="store_true",
                   help="check each target in a process of its own: a crash or hang marks its row CRASH or "
                        "TIMEOUT and the run goes on")
    c.add_argument("--timeout", default=None, metavar="SECONDS",
                   help=f"with --isolate (implied), seconds a target's check may take before its process is "
                        f"killed (default {frontend.DEFAULT_TIMEOUT_S:g})")

    sub.add_parser("list", help="list registered targets", description="Registered targets, one per line.")

    r = sub.add_parser("repro", help="rerun a finding's report", description="Rerun the step sequence of a report.")
    r.add_argument("path", metavar="PATH", help="a report directory (or its repro file)")
    r.add_argument("--engine", default=None, help="auto, cuda or emulate (default: the engine the report recorded)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as e:  # argparse: usage errors exit 2, --help/--version 0
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "list":
            return _list()
        if args.command == "repro":
            return _repro(args)
    except ConfigError as e:
        return _usage(str(e))
    except BaseException as e:
        if not _interrupted(e):
            raise
        print("graphsafe: interrupted", file=sys.stderr)
        return 130
    return _usage(f"unknown command {args.command!r}")  # pragma: no cover - argparse rejects it first


def _interrupted(e: BaseException) -> bool:
    """A KeyboardInterrupt, or an error raised while handling one.

    Hypothesis turns a Ctrl-C that arrives before its engine has started into
    an ``AssertionError`` raised while handling the KeyboardInterrupt.
    """
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _usage(msg: str) -> int:
    print(f"graphsafe: error: {frontend.one_line(msg)}", file=sys.stderr)
    return 2


# -- check -------------------------------------------------------------------------------------
def _check(args: argparse.Namespace) -> int:
    # torch warns on every CUDA pre-screen that sync debug mode is a prototype; it would split
    # the progress lines and says nothing about the target
    warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype feature")
    engine = frontend.parse_engine(args.engine, "--engine")
    frontend.prepare_engine(engine)  # before any target (and its kernels) is imported
    problem = frontend.engine_problem(engine)
    if problem:
        return _usage(problem)
    examples = None if args.examples is None else frontend.parse_int(args.examples, "--examples")
    steps = None if args.steps is None else frontend.parse_int(args.steps, "--steps")
    seed = None if args.seed is None else frontend.parse_int(args.seed, "--seed", minimum=0)
    sizes = frontend.parse_sizes(args.capture_sizes, "--capture-sizes")
    probes = frontend.parse_probes(args.probes, "--probes")
    profile = None if args.profile is None else frontend.profile_name(args.profile)
    if profile is not None and examples is None:
        examples = frontend.default_examples(profile)
    timeout = frontend.DEFAULT_TIMEOUT_S if args.timeout is None else frontend.parse_timeout(args.timeout, "--timeout")
    isolate = args.isolate or args.timeout is not None

    from ._internal import sandbox
    from .checker import TargetError, resolve_target, validate_target

    names = frontend.expand_targets(args.targets)
    if not names:
        return _usage("no targets registered ('all' matched nothing)")
    classes: dict[str, type] = {}
    for name in names:  # resolve everything first: a typo fails before minutes of checking
        try:
            cls, _ = resolve_target(name)
            validate_target(cls)
        except TargetError as e:
            return _usage(str(e))
        classes[name] = cls

    columns = list(probes) + [OTHER]
    rows: list[tuple[str, dict[str, str]]] = []
    results = []
    status = 0
    total = len(names)
    latch = _InterruptLatch()
    try:
        for i, name in enumerate(names, 1):
            latch.check()
            if isolate and i < total:  # the next target's process starts while this one is checked
                sandbox.get_sandbox(classes[names[i]], engine=engine).start(wait=False)
            print(f"[{i}/{total}] {name} ... ", end="", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                result = _run_one(classes[name], engine, profile, isolate, timeout,
                                  dict(examples=examples, steps=steps, probes=list(probes), capture_sizes=sizes,
                                       seed=seed, report_dir=args.report_dir))
            except (sandbox.SandboxCrashed, sandbox.SandboxTimeout) as e:
                mark = "TIMEOUT" if isinstance(e, sandbox.SandboxTimeout) else "CRASH"
                print(f"{mark.lower()} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr, flush=True)
                print(f"graphsafe: {name}: {e.what}; the run goes on", file=sys.stderr, flush=True)
                rows.append((name, {c: mark if c == OTHER else "-" for c in columns}))
                if status == 0:
                    status = 1
                continue
            except (ValueError, TypeError) as e:
                if not _report_error(e, name, t0, rows, columns):
                    raise
                status = 2
                continue
            kinds = ", ".join(sorted(result.kinds)) or "ok"
            print(f"{kinds} ({result.seconds:.1f}s)", file=sys.stderr, flush=True)
            rows.append((name, _cells(result, columns)))
            results.append(result)
            if not result.ok and status == 0:
                status = 1
        latch.check()
    finally:
        latch.close()
        if isolate:
            sandbox.close_all()

    print(_table(rows, columns))
    for result in results:
        for f in result.findings:
            print()
            print(f"{result.target}: {f.kind.value}" + (" (info)" if f.severity != "error" else ""))
            print(f.summary())
            print(f"  fix: {f.fix}")
        for n in result.notes:
            print(f"note ({result.target}): {n}")
    return status


class _InterruptLatch:
    """Remembers a Ctrl-C, so that the run stops at the next target even when the
    KeyboardInterrupt itself was swallowed (one that lands in a garbage-collector
    callback, Hypothesis has one, is only printed by Python, never raised)."""

    def __init__(self) -> None:
        self.hit = False
        self._prev: Any = None
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._prev = signal.signal(signal.SIGINT, self._handle)

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


def _run_one(cls: type, engine: str, profile: str | None, isolate: bool, timeout: float, kwargs: dict[str, Any]):
    """One target's check: in its sandbox with ``isolate``, else here (under ``profile`` when given)."""
    from contextlib import nullcontext

    if isolate:
        from ._internal import sandbox

        return sandbox.get_sandbox(cls, engine=engine).check(timeout, profile=profile, **kwargs)
    with frontend.hypothesis_profile(profile) if profile is not None else nullcontext():
        return frontend.run_check(cls, engine=engine, **kwargs)


def _report_error(e: Exception, name: str, t0: float, rows: list, columns: list[str]) -> bool:
    """Print a contract (or capture-size) error in one line and add an ERROR row; False: not one of those."""
    msg = frontend.contract_message(e, name)
    if msg is None and isinstance(e, ValueError) and "capture size" in str(e):
        msg = f"{name}: {e}"
    if msg is None:
        return False
    print(f"error ({time.perf_counter() - t0:.1f}s)", file=sys.stderr, flush=True)
    print(f"graphsafe: error: {frontend.one_line(msg)}", file=sys.stderr)
    rows.append((name, {c: "ERROR" if c == OTHER else "-" for c in columns}))
    return True


def _cells(result, columns: list[str]) -> dict[str, str]:
    ran = result.examples > 0 or not result.findings
    cells = {c: "ok" if ran else "-" for c in columns}
    for f in result.findings:
        col = f.probe if f.probe in columns else (f.kind.value if f.kind.value in columns else OTHER)
        text = f.kind.value + (" (info)" if f.severity != "error" else "")
        prev = cells[col]
        cells[col] = text if prev in ("ok", "-") else f"{prev}, {text}"
    return cells


def _table(rows: list[tuple[str, dict[str, str]]], columns: list[str]) -> str:
    head = ["target"] + columns
    body = [[name] + [cells[c] for c in columns] for name, cells in rows]
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    fmt = lambda r: "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in body])


# -- list --------------------------------------------------------------------------------------
def _list() -> int:
    frontend.prepare_engine("auto")  # listing imports the reference kernels
    from .registry import lookup, names

    all_names = names()
    width = max((len(n) for n in all_names), default=0)
    for name in all_names:
        try:
            cls = lookup(name)
        except Exception as e:  # one broken target must not hide the others
            desc, has_expected, expected = f"(cannot load: {frontend.one_line(e)})", False, None
        else:
            desc, has_expected, expected = inspect_doc(cls), hasattr(cls, "expected"), getattr(cls, "expected", None)
        line = f"{name.ljust(width)}  {desc}".rstrip()
        if has_expected:
            line += f"  [expected: {getattr(expected, 'value', expected) or 'ok'}]"
        print(line)
    return 0


def inspect_doc(cls: type) -> str:
    """The first line of the class's own docstring ('' when it has none)."""
    doc = cls.__dict__.get("__doc__") or ""
    for line in doc.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _recorded_engine(path: str) -> str:
    """The engine a report recorded (so an emulator report gets the Triton interpreter), else auto."""
    try:
        from .reports.jsonio import read_data

        engine = read_data(path).get("engine")
    except Exception:  # noqa: BLE001 - repro_main reports unreadable reports itself
        return "auto"
    return engine if engine in frontend.ENGINES else "auto"


# -- repro -------------------------------------------------------------------------------------
def _repro(args: argparse.Namespace) -> int:
    engine = None if args.engine is None else frontend.parse_engine(args.engine, "--engine")
    frontend.prepare_engine(engine or _recorded_engine(args.path))
    try:
        from .reports import repro_main
    except ImportError as e:
        return _usage(f"'graphsafe repro' needs graphsafe.reports.repro_main, which is not available ({e})")
    rv = repro_main(args.path, engine)
    return int(rv) if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())

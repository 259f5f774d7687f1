"""The check itself, in this process: capture a target, search step sequences, diff against eager.

:func:`run_check` is one search (Hypothesis draws plans, shrinks every failure); :func:`reproduce`
replays one exact step sequence.  Neither writes reports, isolates or times out: that is the
front end's runner (:mod:`graphsafe.frontend.runner`), which :func:`graphsafe.check` calls.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import DirectoryBasedExampleDatabase

from ..capture.compare import Comparator
from ..capture.session import CaptureSession, as_target_failure
from ..contract import Batch, CaptureSpec, Support
from ..engines import Engine, get_engine
from ..errors import UsageError
from ..findings import CheckResult, Finding, FindingError, FindingKind
from ..probes import PROBES
from .options import CheckOptions
from .plans import Plan, plans
from .steps import ExampleRunner, target_error
from .targets import resolve_target, validate_target

__all__ = ["run_check", "reproduce", "clear_sessions", "prepared"]


# -- sessions: one graph instance per process and (target, spec, engine, sizes) --------------------
_SESSIONS: dict[tuple, CaptureSession] = {}


def _session(cls: type, spec: CaptureSpec, engine: Engine, sizes: tuple[int, ...]) -> CaptureSession:
    key = (cls, spec, engine.name, str(engine.device), tuple(sizes))
    s = _SESSIONS.get(key)
    if s is None:
        with np.errstate(all="ignore"):
            s = CaptureSession(cls, spec, engine, sizes)
        _SESSIONS[key] = s
    return s


def clear_sessions() -> None:
    """Drop every cached graph (frees graph memory)."""
    _SESSIONS.clear()


# -- set-up shared by check and reproduce ----------------------------------------------------------
@dataclass
class Prepared:
    """A resolved check: the class, its name, spec, engine, probes and an empty result."""

    cls: type
    name: str
    spec: CaptureSpec
    engine: Engine
    enabled: set[str]
    options: CheckOptions
    result: CheckResult

    def finish(self, f: Finding) -> Finding:
        f.target, f.engine, f.spec = self.name, self.engine.name, self.spec
        return f

    def runner(self, main: CaptureSession | None) -> ExampleRunner:
        return ExampleRunner(self.cls, self.name, self.spec, self.engine, main, self.enabled,
                             Comparator(self.spec, self.options.tolerance))


def prepared(target: Any, options: CheckOptions) -> Prepared:
    """Resolve and validate ``target`` against ``options`` (usage and contract errors raise here)."""
    cls, name = resolve_target(target)
    validate_target(cls)
    spec = options.spec_for(cls)
    engine = get_engine(options.engine, options.device)
    # a failed capture is always reported: without a graph nothing else can be checked
    enabled = options.enabled | {FindingKind.CAPTURE_FAILURE.value}
    result = CheckResult(target=name, engine=engine.name, spec=spec, probes=tuple(sorted(options.enabled)))
    return Prepared(cls, name, spec, engine, enabled, options, result)


def _main_session(p: Prepared, sizes: tuple[int, ...]) -> CaptureSession | None:
    """The worst-case session, or None with the result's finding set when the capture could not run."""
    try:
        main = _session(p.cls, p.spec, p.engine, sizes)
    except Exception as e:
        err = as_target_failure(e, "capture (graphsafe's ledger)")
        if err is None:
            raise
        p.result.findings.append(p.finish(target_error(err)))
        return None
    p.result.notes.extend(n for n in main.notes if n not in p.result.notes)
    if main.capture_error is not None:
        f = p.runner(main).capture_finding(main.capture_error)
        p.result.findings.append(p.finish(f))
        return None
    return main


# -- the search ------------------------------------------------------------------------------------
_ERROR_CLASSES: dict[str, type] = {}


def _error_class(kind: FindingKind) -> type:
    """One FindingError subclass per kind: Hypothesis tells distinct failures apart by type."""
    name = "Finding_" + re.sub(r"\W", "_", kind.value)
    cls = _ERROR_CLASSES.get(name)
    if cls is None:
        cls = _ERROR_CLASSES[name] = type(name, (FindingError,), {})
    return cls


def _collect(exc: BaseException, out: list[Finding]) -> bool:
    if isinstance(exc, FindingError):
        out.append(exc.finding)
        return True
    inner = getattr(exc, "exceptions", None)
    if inner:
        found = False
        for e in inner:
            found |= _collect(e, out)
        return found
    if exc.__cause__ is not None and _collect(exc.__cause__, out):
        return True
    return False


def _database(name: str, database: str | bool | None):
    if database is False:
        return None
    if isinstance(database, str):
        return DirectoryBasedExampleDatabase(database)
    if settings.default.database is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    root = os.environ.get("GRAPHSAFE_DB", os.path.join(".hypothesis", "graphsafe"))
    return DirectoryBasedExampleDatabase(os.path.join(root, slug))


def run_check(target: Any, options: CheckOptions) -> CheckResult:
    """Capture ``target``, replay Hypothesis-drawn step sequences, and return the findings."""
    t0 = time.perf_counter()
    p = prepared(target, options)
    result = p.result
    sizes = options.sizes_for(p.spec)
    main = _main_session(p, sizes)
    if main is None:
        result.seconds = time.perf_counter() - t0
        return result

    drawn = any(PROBES[n].drawn_capture for n in options.enabled)
    runner = p.runner(main)
    counter: dict[str, Any] = {"n": 0, "first": {}, "t": {}}
    t_search = time.perf_counter()

    @settings(
        parent=settings.default,
        max_examples=options.examples,
        deadline=None,
        database=_database(f"{p.name}-{p.engine.name}-{'-'.join(sorted(options.enabled))}", options.database),
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=True,
        print_blob=False,
        # no "explain" phase: it re-runs the failing example dozens of times to annotate it
        phases=[ph for ph in settings.default.phases if ph != Phase.explain],
    )
    @given(plan=plans(p.spec, Support(p.cls.support), sizes, drawn, options.steps))
    def run_examples(plan: Plan) -> None:
        counter["n"] += 1
        f = runner.run(plan)
        if f is not None:
            counter["first"].setdefault(f.kind, counter["n"])
            counter["t"].setdefault(f.kind, time.perf_counter() - t_search)
            raise _error_class(f.kind)(f)

    if options.seed is not None:
        run_examples = hypothesis_seed(options.seed)(run_examples)
    found: list[Finding] = []
    try:
        with warnings.catch_warnings():
            # NaN poison makes the Triton interpreter's numpy reductions warn ("All-NaN slice"): expected
            warnings.simplefilter("ignore", RuntimeWarning)
            run_examples()
    except BaseException as exc:  # noqa: BLE001 - findings arrive as (groups of) exceptions
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) or not _collect(exc, found):
            raise
    seen = set()
    for f in found:
        p.finish(f)
        f.examples_to_find = counter["first"].get(f.kind, counter["n"])
        f.seconds_to_find = counter["t"].get(f.kind, 0.0)
        if f.key not in seen:
            seen.add(f.key)
            result.findings.append(f)
    # examples drawn before the first finding (or all of them); later calls are Hypothesis shrinking
    result.examples = min(counter["first"].values(), default=counter["n"])
    result.calls = counter["n"]
    result.steps = runner.steps_run
    result.seconds = time.perf_counter() - t0
    return result


def reproduce(
    target: Any,
    steps: Sequence[Batch | dict],
    options: CheckOptions | None = None,
    *,
    capture_batch: Batch | None = None,
    capture_size: int | None = None,
    **fields: Any,
) -> CheckResult:
    """Run one exact step sequence (no search, no shrinking): what a report's ``repro.py`` calls.

    ``options`` (or keyword ``fields`` of :class:`CheckOptions`: ``engine``, ``spec``, ...) say how.
    With ``capture_batch`` the graph is captured with that batch at ``capture_size`` (a drawn
    capture); otherwise with the worst case at every capture size.  Returns a
    :class:`CheckResult` with at most one finding.

    Example::

        r = graphsafe.reproduce("triton_mla:nan_padding", [Batch((1,), (5,), ((1,),), seed=3)], engine="emulate")
        r.ok  # False while the bug is there
    """
    t0 = time.perf_counter()
    options = options or CheckOptions()
    if fields:
        options = options.replace(**fields)
    p = prepared(target, options)
    batches = [b if isinstance(b, Batch) else Batch.from_dict(b) for b in steps]
    for b in batches:
        p.spec.validate_batch(b)
    if capture_batch is not None:
        size = capture_size or capture_batch.num_slots
        if not 1 <= size <= p.spec.max_reqs:
            raise UsageError(f"capture size {size} must be an int in [1, spec.max_reqs={p.spec.max_reqs}]")
        plan, main = Plan(tuple(batches), capture_batch, size), None
    else:
        plan = Plan(tuple(batches))
        main = _main_session(p, options.sizes_for(p.spec))
        if main is None:
            return p.result
    runner = p.runner(main)
    f = runner.run(plan)
    if f is not None:
        p.result.findings.append(p.finish(f))
    p.result.examples, p.result.steps = 1, runner.steps_run
    p.result.seconds = time.perf_counter() - t0
    return p.result

"""The check itself, in this process: capture a target, search step sequences, diff against eager.

:func:`run_check` is one search (Hypothesis draws plans, shrinks every failure); :func:`reproduce`
replays one exact step sequence.  Neither writes reports, isolates or times out: that is the
front end's runner (:mod:`graphsafe.frontend.runner`), which :func:`graphsafe.check` calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
import warnings
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import Phase as HypothesisPhase
from hypothesis import seed as hypothesis_seed
from hypothesis.control import current_build_context

from ..capture.compare import Comparator
from ..capture.context import LearnedWrites
from ..capture.policies import POLICIES, CapturePolicy
from ..capture.session import CaptureSession, as_target_failure
from ..contract import Batch, CaptureSpec, Support, Target
from ..diagnosis.causes import cause_key, group_by_cause
from ..engines import Engine, get_engine
from ..errors import ContextBroken, UsageError
from ..findings import CheckResult, Finding, FindingKind
from .database import example_database
from .failures import collect, error_class
from .options import CheckOptions
from .plans import Phase, Plan, drawn_plans, phases, session_plans
from .steps import ExampleRunner, Symptom, target_error
from .targets import resolve_target, validate_target

__all__ = ["run_check", "reproduce", "prepared", "phase_session", "run_one", "Progress"]


# -- set-up shared by check and reproduce ----------------------------------------------------------
@dataclass
class Prepared:
    """A resolved check: the class, its name, spec, engine, probes and an empty result."""

    cls: type
    name: str
    spec: CaptureSpec
    engine: Engine
    support: Support
    enabled: set[str]
    options: CheckOptions
    result: CheckResult

    def finish(self, f: Finding) -> Finding:
        f.target, f.engine, f.spec = self.name, self.engine.name, self.spec
        return f

    def runner(self, main: CaptureSession | None, known_writes: LearnedWrites | None = None) -> ExampleRunner:
        return ExampleRunner(
            self.cls,
            self.name,
            self.spec,
            self.engine,
            main,
            self.enabled,
            Comparator(self.spec, self.options.tolerance),
            known_writes,
            self.support,
        )


def prepared(target: Any, options: CheckOptions) -> Prepared:
    """Resolve and validate ``target`` against ``options`` (usage and contract errors raise here)."""
    cls, name = resolve_target(target)
    validate_target(cls)
    spec = options.spec_for(cls)
    engine = get_engine(options.engine, options.device)
    # a failed capture is always reported: without a graph nothing else can be checked
    enabled = options.enabled | {FindingKind.CAPTURE_FAILURE.value}
    support = options.support_for(cls)
    result = CheckResult(
        target=name, engine=engine.name, spec=spec, probes=tuple(sorted(options.enabled)), support=support.name
    )
    if options.support is None and not any("support" in vars(k) for k in cls.__mro__ if k not in (Target, object)):
        result.notes.append(
            f"{name} does not set support: checked at the lowest level, Support.{support.name}; "
            "declare the level the backend's graphs serve (graphsafe audit tells the highest safe one)"
        )
    return Prepared(cls, name, spec, engine, support, enabled, options, result)


def phase_session(
    p: Prepared, sizes: tuple[int, ...], policy: CapturePolicy, known_writes: LearnedWrites | None = None
) -> CaptureSession | None:
    """The phase's session, or None with the result's finding set when it could not capture."""
    try:
        with np.errstate(all="ignore"):
            session = CaptureSession(
                p.cls, p.spec, p.engine, sizes, policy=policy, known_writes=known_writes, support=p.support
            )
    except Exception as e:
        err = as_target_failure(e, "capture (graphsafe's ledger)")
        if err is None:
            raise
        p.result.findings.append(p.finish(target_error(err)))
        return None
    p.result.notes.extend(n for n in session.notes if n not in p.result.notes)
    if session.capture_error is not None:
        f = p.runner(session).capture_finding(session.capture_error)
        assert f is not None, "the capture-failure probe reports every failed capture"
        p.result.findings.append(p.finish(f))
        return None
    return session


# -- the search ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Progress:
    """Where a running check is: examples run (shrinking included) of the planned ones, the phase
    (capture policy), the finding kinds seen so far, and the stage of the phase's search:
    ``"searching"``, ``"shrinking"`` once an example of the phase failed, or ``"diagnosing"`` while a
    step whose replay differed is explained (the diagnosis re-runs the target)."""

    examples: int
    planned: int
    phase: str
    kinds: tuple[str, ...]
    stage: str = "searching"


def run_check(
    target: Any,
    options: CheckOptions,
    progress: Callable[[Progress], None] | None = None,
    partial: Callable[[CheckResult], None] | None = None,
) -> CheckResult:
    """Capture ``target`` under each capture policy, replay Hypothesis-drawn step sequences, and return
    the findings, one per root cause.  ``progress`` is called after every example, and before each
    diagnosis (stage ``"diagnosing"``); ``partial`` after each phase that found something, with the result so far
    (a sandbox's parent keeps it: a later phase's replay that never ends takes the process with it)."""
    t0 = time.perf_counter()
    p = prepared(target, options)
    sizes = options.sizes_for(p.spec)
    plan = phases(options.policies_for(p.cls), options.examples)
    counter: dict[str, Any] = {
        "n": 0,
        "first": {},
        "t": {},
        "steps": 0,
        "planned": sum(ph.examples for ph in plan),
        "progress": progress,
        "partial": partial,
    }
    with _collect_only_new_objects():
        found = _phases(p, plan, sizes, counter, t0)
    result = p.result
    for f in found:
        p.finish(f)
        f.examples_to_find = counter["first"].get(f.kind, counter["n"])
        f.seconds_to_find = counter["t"].get(f.kind, 0.0)
    result.findings = group_by_cause(result.findings + found)
    # examples drawn before the first finding (or all of them); later calls are Hypothesis shrinking
    result.examples = min(counter["first"].values(), default=counter["n"])
    result.calls = counter["n"]
    result.steps = counter["steps"]
    result.seconds = time.perf_counter() - t0
    return result


@contextlib.contextmanager
def _collect_only_new_objects():
    """While a check runs, ``gc.collect()`` looks only at the objects made since it began.

    The collection after each phase frees that phase's graphs and target instance (they reference
    each other).  A full collection walks every object of the process, hundreds of thousands after
    importing torch, dynamo and triton, and would be paid once per phase (``benchmarks/profile_check.py``
    shows where a check's time goes).  What existed
    before the check is frozen meanwhile (``gc.freeze``; refcounting still frees it) and goes back
    to the oldest generation afterwards.  Where something is frozen already (a sandbox child, whose fork
    server froze its imports) nothing more is frozen: the child serves check after check.
    """
    if gc.get_freeze_count():  # frozen already (a sandbox child): freezing more would pin each check's leftovers
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _phases(p: Prepared, plan: list[Phase], sizes: tuple[int, ...], counter: dict, t0: float) -> list[Finding]:
    """Run each phase's search in turn, with only that phase's graphs alive; the findings they shrank.

    A later phase does not find and shrink again what an earlier one reported: an example whose
    finding has the kind and cause of one found already counts as passing there (the phase's first
    such finding joins the result unshrunk, as evidence for its cause), and the phase searches on.
    """
    options, support = p.options, p.support
    found: list[Finding] = []
    known: set[tuple] = set()  # (kind, cause) of every finding reported so far
    learned: LearnedWrites | None = None  # kernel writes the first session learned, for later captures
    runner: ExampleRunner | None = None
    session: CaptureSession | None = None
    for phase in plan:
        if phase.policy.batch is None:
            runner = p.runner(None, known_writes=learned)
            strategy = drawn_plans(p.spec, support, sizes, options.steps)
        else:
            session = phase_session(p, sizes, phase.policy, known_writes=learned)
            if session is None:
                if any(f.kind == FindingKind.TARGET_ERROR for f in p.result.findings):
                    break  # setup() or prepare() raises whatever the capture: every phase would
                continue
            learned = learned if learned is not None else session.learned_writes()
            runner = p.runner(session, known_writes=learned)
            strategy = session_plans(p.spec, support, sizes, session.infos[max(session.graphs)].batch, options.steps)
        fault = " (a kernel faulted, most likely a replay: an illegal memory access; the CUDA context became unusable)"
        try:
            new = _search(p, runner, strategy, phase, counter, t0, known)
        except ContextBroken as e:
            if not found:
                raise  # no verdict before the fault: the error says which example and step faulted
            new, fault = [], f": {e.message}"
        known |= {_known_key(f) for f in new}
        found += new + runner.infos
        counter["steps"] += runner.steps_run
        if counter["partial"] is not None and new + runner.infos:  # (ungrouped: grouping merges findings in place)
            so_far = dict(
                examples=counter["n"], calls=counter["n"], steps=counter["steps"], seconds=time.perf_counter() - t0
            )
            counter["partial"](
                dataclasses.replace(p.result, findings=p.result.findings + [p.finish(f) for f in found], **so_far)
            )
        _release(runner, session)  # the phase's graphs and target instances go before the next phase's are made
        runner = session = None
        if not p.engine.healthy():  # a replay faulted: nothing more can run in this process
            p.result.notes.append(
                f"a device fault ended the {phase.policy.name} capture phase{fault}; the findings "
                "above were made before it, and the later phases did not run"
            )
            break
    return found


def _release(runner: ExampleRunner, session: CaptureSession | None) -> None:
    """Free a finished phase's graphs and target instances now.

    Closing the session drops its graphs and instance although the session object itself lives on in a
    reference cycle (Hypothesis's wrapped test function refers to itself, and its closure to the runner).
    After a phase whose examples passed, nothing else holds what the phase made: each eager instance died
    with its example.  Only when something is still alive (a failing example's traceback holds its frames,
    or the target's own objects refer to each other) does a collection run: it walks every object made
    since the check began, which is why it runs only then (``benchmarks/profile_check.py``).
    """
    if session is not None:
        runner.track_session(session)
        session.close()
    if runner.leftovers():
        gc.collect()


class _DeviceFault(BaseException):
    """Carries a :class:`ContextBroken` out of a Hypothesis search.  Nothing can run on the device after a
    fault, so a search must end at the example that faulted: as an ``Exception`` it would be replayed (the
    replay fails differently on the broken context: a ``FlakyFailure``) and shrunk on a dead device."""

    def __init__(self, error: ContextBroken):
        super().__init__(error.message)
        self.error = error


def _known_key(f: Finding) -> tuple:
    return f.kind, cause_key(f.cause)


def _search(
    p: Prepared,
    runner: ExampleRunner,
    strategy,
    phase: Phase,
    counter: dict,
    t0: float,
    known: AbstractSet[tuple] = frozenset(),
) -> list[Finding]:
    """One Hypothesis search over the phase's plans; the findings it shrank, and the first finding of each
    ``known`` (kind, cause) it met again (not failed, so not shrunk: see :func:`_phases`)."""
    options = p.options
    again: dict[tuple, Finding] = {}
    raised: dict[tuple, Finding] = {}  # the first finding of each cause this search failed an example with
    symptoms: dict[str, Finding | None] = {}  # each symptom's first example, diagnosed (None: no error)
    if counter["progress"] is not None:  # a diagnosis re-runs the target: seconds a progress line can name
        runner.on_diagnose = lambda: counter["progress"](
            Progress(
                counter["n"],
                counter["planned"],
                phase.policy.name,
                tuple(sorted(k.value for k in counter["first"])),
                "diagnosing",
            )
        )

    @settings(
        parent=settings.default,
        max_examples=phase.examples,
        deadline=None,
        database=example_database(
            f"{p.name}-{p.engine.name}-{phase.policy.name}-{'-'.join(sorted(options.enabled))}", options.database
        ),
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=True,
        print_blob=False,
        # no "explain" phase: it re-runs the failing example dozens of times to annotate it
        phases=[ph for ph in settings().phases if ph != HypothesisPhase.explain],
    )
    @given(plan=strategy)
    def run_examples(plan: Plan) -> None:
        counter["n"] += 1
        final = current_build_context().is_final  # the example shrinking left, run once more: diagnose it
        try:
            f = runner.run(plan, diagnose=final)
            symptom = runner.symptom  # the first difference this run met (diagnosed when final)
            if isinstance(f, Symptom) and f.key not in symptoms:
                # the first example of this symptom: diagnosed now, once (is it an error at all, and a new cause?);
                # a step probe's was where the runner met it (a race may not show in a second run)
                first = runner.first_diagnoses[f.key] if f.key in runner.first_diagnoses else runner.run(plan)
                symptoms[f.key] = first if isinstance(first, Finding) else None
                if not isinstance(first, Finding) or _known_key(first) in known:
                    runner.dismiss_symptom(f)  # no error, or a cause an earlier phase reported: search on
                    f = first
                else:
                    _first_seen(first)
        except ContextBroken as e:
            raise _DeviceFault(e) from None  # not an Exception: Hypothesis stops at once, neither replays nor shrinks
        if isinstance(f, Finding) and _known_key(f) in known:
            again.setdefault(_known_key(f), f)
            f = None
        if counter["progress"] is not None:
            seen = {k.value for k in counter["first"]} | ({f.kind.value} if isinstance(f, Finding) else set())
            stage = "shrinking" if raised or symptoms else "searching"
            counter["progress"](
                Progress(counter["n"], counter["planned"], phase.policy.name, tuple(sorted(seen)), stage)
            )
        if isinstance(f, Symptom):
            raise error_class(f.key)(symptoms.get(f.key))  # shrink on the symptom; its finding comes at the end
        if final and symptom is not None and (f is None or f is runner.diagnosed):
            # the shrunk example's diagnosis, raised as the symptom it was shrunk on; where the shrunk example is
            # no error after all, the first example's diagnosis stands (None: that was none either)
            raise error_class(symptom.key)(f or symptoms.get(symptom.key))
        if f is not None:
            _first_seen(f)
            raise error_class(f.kind)(f)

    def _first_seen(f: Finding) -> None:
        counter["first"].setdefault(f.kind, counter["n"])
        counter["t"].setdefault(f.kind, time.perf_counter() - t0)
        raised.setdefault(_known_key(f), f)

    if options.seed is not None:
        run_examples = hypothesis_seed(options.seed)(run_examples)
    found: list[Finding] = []
    try:
        with warnings.catch_warnings():
            # NaN poison makes the Triton interpreter's numpy reductions warn ("All-NaN slice"): expected
            warnings.simplefilter("ignore", RuntimeWarning)
            run_examples()
    except _DeviceFault as fault:
        if not raised:
            raise fault.error from None
        return list(raised.values()) + list(again.values())  # found before the fault (shrinking stopped there)
    except BaseException as exc:  # noqa: BLE001 - findings arrive as (groups of) exceptions
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) or not collect(exc, found):
            raise
    return found + list(again.values())


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
    capture); otherwise at every capture size with the first capture policy of ``options``
    that is not ``drawn`` (``worst`` by default).  Returns a
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
        policy = next((q for q in options.policies_for(p.cls) if q.batch is not None), POLICIES["worst"])
        main = phase_session(p, options.sizes_for(p.spec), policy)
        if main is None:
            return p.result
    return run_one(p, main, plan, t0)


def run_one(
    p: Prepared, main: CaptureSession | None, plan: Plan, t0: float, unreplayable: int | None = None
) -> CheckResult:
    """``p``'s result for ``plan`` on ``main``, diagnosed; ``unreplayable``: a step not replayed (``unreplayable.py``)."""
    runner = p.runner(main)
    runner.unreplayable_step = unreplayable
    f = runner.run(plan)
    assert not isinstance(f, Symptom), "a run that diagnoses returns findings"
    if f is not None:
        p.result.findings.append(p.finish(f))
    p.result.examples, p.result.steps, p.result.seconds = 1, runner.steps_run, time.perf_counter() - t0
    return p.result

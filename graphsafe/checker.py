"""``graphsafe.check``: capture a target, replay drawn step sequences, diff against eager.

The per-step path (poison, prepare, replay, compare) is the hot path: capture
happens once per process and size; the diagnosis probes run only after a
difference was seen.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from . import probes as probe_mod
from ._internal.evidence import StepContext, randomise_static, static_dict
from ._internal.ledger import poison_floats, storages_of
from ._internal.session import CAPTURE_SEED, CaptureSession, TargetRaised, call_target, capture_query_len
from .compare import compare_many
from .contract import Batch, CaptureSpec, Support, Target, contract_error, is_contract_error
from .engines import Engine, get_engine
from .engines.base import as_outputs
from .findings import CheckResult, Finding, FindingError, FindingKind, Mismatch
from .probes import (
    nondeterministic_replay,
    stale_pointer,
)

__all__ = ["check", "TargetError", "resolve_target", "validate_target"]

DEFAULT_EXAMPLES = 50
DEFAULT_STEPS = 4


class TargetError(ValueError):
    """The target breaks the contract (missing method, wrong return type, unknown name)."""


# -- resolving and validating targets ----------------------------------------------------
def resolve_target(target: Any) -> tuple[type, str]:
    """A Target class from a class, ``"module:Class"`` or a registered name."""
    if inspect.isclass(target):
        return target, getattr(target, "name", None) or f"{target.__module__}:{target.__qualname__}"
    if not isinstance(target, str):
        raise TargetError(f"target must be a Target class, 'module:Class' or a registered name, got {type(target).__name__}")
    from .registry import lookup

    return lookup(target), target


def validate_target(cls: type) -> None:
    """Raise :class:`TargetError` naming the method or attribute that breaks the contract."""
    name = getattr(cls, "__qualname__", repr(cls))
    for meth in ("setup", "prepare", "forward"):
        fn = getattr(cls, meth, None)
        if fn is None or not callable(fn):
            raise TargetError(f"{name} has no {meth}() method: a Target needs setup(spec, device), prepare(batch) and forward()")
        if issubclass(cls, Target) and getattr(Target, meth) is fn:
            raise TargetError(f"{name}.{meth}() is not implemented: override it (see graphsafe.Target's docstring)")
    support = getattr(cls, "support", None)
    if not isinstance(support, Support):
        try:
            support = Support(support)
        except Exception:
            raise TargetError(f"{name}.support must be a graphsafe.Support, got {support!r}") from None
    if support == Support.NEVER:
        raise TargetError(f"{name}.support is Support.NEVER: such a backend must not be captured, so there is nothing to check")
    spec = getattr(cls, "default_spec", None)
    if spec is not None and not isinstance(spec, CaptureSpec):
        raise TargetError(f"{name}.default_spec must be a graphsafe.CaptureSpec or None, got {type(spec).__name__}")


def _live(target: Target, outputs: tuple[torch.Tensor, ...], batch: Batch) -> list[torch.Tensor]:
    live = target.live(outputs, batch)
    if isinstance(live, torch.Tensor):
        live = (live,)
    if not isinstance(live, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in live):
        raise contract_error(f"{type(target).__name__}.live() must return a tuple of tensors, got {type(live).__name__}")
    for t in live:
        if t.dim() == 0 or t.shape[0] != batch.num_tokens and type(target).live is Target.live:
            raise contract_error(
                f"{type(target).__name__}.live() returned a tensor of shape {tuple(t.shape)}; rows must be the "
                f"batch's {batch.num_tokens} live tokens (override live() if your outputs are laid out differently)"
            )
    return list(live)


# -- sessions: one graph instance per process ----------------------------------------------
_SESSIONS: dict[tuple, CaptureSession] = {}


def _session(cls, spec, engine: Engine, sizes) -> CaptureSession:
    key = (cls, spec, engine.name, str(engine.device), tuple(sizes))
    s = _SESSIONS.get(key)
    if s is None:
        s = CaptureSession(cls, spec, engine, sizes)
        _SESSIONS[key] = s
    return s


def clear_sessions() -> None:
    """Drop every cached graph (frees graph memory)."""
    _SESSIONS.clear()


# -- plans ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    steps: tuple[Batch, ...]
    capture: Batch | None = None  # a drawn capture batch (frozen-host-value probe)
    size: int = 0


def _plans(spec: CaptureSpec, support: Support, sizes: Sequence[int], drawn: bool, max_steps: int):
    import strategies as gs

    q = capture_query_len(support, spec)
    top = max(sizes)
    main_spec = dataclasses.replace(spec, max_reqs=top, capture_sizes=())
    worst = spec.worst_case_batch(top, query_len=q, seed=CAPTURE_SEED)
    # Strategies are built once per check: building them inside draws costs milliseconds an example.
    worst_steps = gs.step_sequences(main_spec, support=support, max_steps=max_steps, capture_batch=worst)
    captures, drawn_steps = {}, {}
    if drawn:
        for size in sizes:
            # shared: the steps strategy sees the same capture batch the plan draws
            captures[size] = st.shared(gs.capture_batches(spec, support=support, num_slots=size),
                                       key=f"graphsafe-capture-{size}")
            sub = dataclasses.replace(spec, max_reqs=size, capture_sizes=())
            drawn_steps[size] = gs.step_sequences(sub, support=support, max_steps=max_steps,
                                                  capture_batch=captures[size], beyond_capture=True)
    size_choice = st.sampled_from(sorted(sizes))

    @st.composite
    def plan(draw):
        # one example in four captures with a drawn batch (a fresh capture each: the costly kind)
        if drawn and draw(st.integers(0, 3)) == 3:
            size = draw(size_choice)
            capture = draw(captures[size])
            steps = draw(drawn_steps[size])
            return Plan(tuple(steps), capture, size)
        return Plan(tuple(draw(worst_steps)))

    return plan()


# -- one example ---------------------------------------------------------------------------
class _Runner:
    def __init__(self, cls, name, spec, engine, main: CaptureSession, enabled: set[str], *, rtol, atol, bitwise):
        self.cls, self.name, self.spec, self.engine, self.main = cls, name, spec, engine, main
        self.enabled = enabled
        self.rtol, self.atol, self.bitwise = rtol, atol, bitwise
        self.steps_run = 0
        self.notes: list[str] = []

    # comparisons ------------------------------------------------------------------------
    def _locate_rows(self, batch: Batch):
        return lambda row: dict(zip(("request", "token"), batch.token_owner(row)))

    def _locate_blocks(self, batch: Batch, name: str, t: torch.Tensor):
        if not (t.dim() > 0 and t.shape[0] == self.spec.num_blocks):
            return None
        bs = self.spec.block_size

        def loc(row: int) -> dict:  # only called for a mismatch: the owner map is built then
            owner = {b: (r, i) for r, table_row in enumerate(batch.block_table) for i, b in enumerate(table_row)}
            r, i = owner.get(row, (-1, -1))
            return {"block": row, "request": r, "token_block": i, "first_token": i * bs if r >= 0 else -1}

        return loc

    def compare_all(self, live_a, live_b, static_a, static_b, batch) -> list[Mismatch]:
        rows = self._locate_rows(batch)
        pairs = [(f"output[{i}]", a, b, rows) for i, (a, b) in enumerate(zip(live_a, live_b))]
        pairs += [(f"static[{name!r}]", a, static_b[name], self._locate_blocks(batch, name, a))
                  for name, a in static_a.items() if name in static_b]
        out = compare_many(pairs, rtol=self.rtol, atol=self.atol, bitwise=self.bitwise)
        if len(live_a) != len(live_b):
            at = sum(1 for m in out if m.tensor.startswith("output["))
            out.insert(at, Mismatch("outputs", 1, 1, float("inf"), float("inf"),
                                    [{"note": f"{len(live_a)} outputs (graph) vs {len(live_b)} (eager)"}]))
        return out

    # the example ------------------------------------------------------------------------
    def run(self, plan: Plan) -> Finding | None:
        try:
            # NaN poison makes the Triton interpreter's numpy warn on every op: expected, silenced
            with torch.no_grad(), np.errstate(all="ignore"):
                return self._run(plan)
        except TargetRaised as e:
            f = e.finding()
            f.batches = list(plan.steps)
            return f

    def _run(self, plan: Plan) -> Finding | None:
        eng = self.engine
        if plan.capture is not None:
            known = self.main.learned_writes() if self.main is not None else None
            session = CaptureSession(self.cls, self.spec, eng, (plan.size,), capture_batch=plan.capture,
                                     known_writes=known)
            if session.failure is not None:
                f = session.failure
                f.batches = []
                return f
        else:
            session = self.main
        if not plan.steps:
            return None
        seed = plan.steps[0].seed
        session.reset(seed)
        g = session.target
        eager = self.cls()
        call_target("setup(spec, device)", eager.setup, self.spec, eng.device)
        randomise_static(eager, seed)
        history: list[Batch] = []
        padded: list[Batch] = []
        for batch in plan.steps:
            size = session.size_for(batch.num_reqs)
            graph, info = session.graphs[size], session.infos[size]
            if batch.seed == info.batch.seed:
                raise AssertionError("graphsafe bug: a replayed batch reuses the capture batch's seed (inputs)")
            pb = batch.padded(size)
            history.append(batch)
            padded.append(pb)
            self.steps_run += 1

            poison_floats(storages_of(g, session.static_keys).values())
            call_target("prepare(batch)", g.prepare, pb)
            dead = stale_pointer.run(session, graph, info)
            if dead is not None:
                return self._finish(dead, "stale-pointer", session, info, history) if "stale-pointer" in self.enabled else None
            statics = snap = None
            # one double replay an example: enough to see a race, without doubling every step
            if "nondeterministic-replay" in self.enabled and len(history) == 1:
                statics = static_dict(g)
                snap = {k: v.clone() for k, v in statics.items()}
            poison_floats(graph.outputs)
            graph.replay()
            # Wait for the replay here, although the clones and the eager run would queue behind it:
            # a device fault (an illegal address, a trap) then surfaces in the replay, not in the
            # target's eager prepare() where it would pass for the target's own error.
            eng.synchronize()
            live_g = [t.clone() for t in _live(g, graph.outputs, pb)]
            if snap is not None:
                for k, v in statics.items():
                    v.copy_(snap[k])
                poison_floats(graph.outputs)
                graph.replay()
                eng.synchronize()
                again = [t.clone() for t in _live(g, graph.outputs, pb)]
                rows = self._locate_rows(batch)
                f = nondeterministic_replay.run(live_g, again, lambda a, b: compare_many(
                    [(f"output[{i}]", x, y, rows) for i, (x, y) in enumerate(zip(a, b))], bitwise=True))
                if f is not None:
                    return self._finish(f, "nondeterministic-replay", session, info, history)

            call_target("prepare(batch) [eager]", eager.prepare, batch)
            out_e = call_target("forward() [eager]", eager.forward)
            try:
                outs_e = as_outputs(out_e)
            except TypeError as e:
                raise contract_error(f"{e} (eager instance)") from None
            live_e = _live(eager, outs_e, batch)
            static_g, static_e = static_dict(g), static_dict(eager)
            mism = self.compare_all(live_g, live_e, static_g, static_e, batch)
            if mism:
                ctx = StepContext(
                    target_cls=self.cls, target_name=self.name, spec=self.spec, engine=eng, session=session,
                    graph=graph, info=info, history=list(history), padded=list(padded), seed=seed,
                    graph_live=live_g, eager_live=live_e, graph_static=static_g, eager_static=static_e,
                    mismatches=mism, compare_fn=self.compare_all,
                )
                return self._diagnose(ctx)
        return None

    def _diagnose(self, ctx: StepContext) -> Finding | None:
        heat = _heatmap(ctx)
        # A NaN-poisoned buffer that nothing ever writes is a contract error, not a capture hazard:
        # weights or caches missing from static().  Checked first, or it would pass for stale padding.
        undeclared = [r for r in ctx.evidence.unwritten_reads if r.origin == "never-written" and r.floating]
        if undeclared:
            f = Finding(
                kind=FindingKind.TARGET_ERROR,
                message=(
                    f"forward() reads {', '.join(r.path for r in undeclared)}, which prepare() never writes and "
                    "static() does not declare; graphsafe NaN-fills such buffers before each step. Return it from "
                    "static() if it persists by design (weights, caches)"
                ),
                where=undeclared[0].path,
                mismatches=ctx.mismatches,
                heatmap=heat,
            )
            return self._finish(f, "", ctx.session, ctx.info, ctx.history)
        for probe in probe_mod.PROBES.values():
            if probe.stage != "diagnose":
                continue
            f = probe.run(ctx)
            if f is not None:
                if not f.mismatches:
                    f.mismatches = ctx.mismatches
                f.heatmap = heat
                if probe.name not in self.enabled:
                    return None  # explained by a probe this run does not report
                return self._finish(f, probe.name, ctx.session, ctx.info, ctx.history)
        m = ctx.mismatches[0]
        f = Finding(
            kind=FindingKind.REPLAY_MISMATCH,
            message=f"{m.tensor} differs from eager ({m.count}/{m.total}, max abs {m.max_abs:.3g}) and no probe explains why",
            where=m.tensor,
            mismatches=ctx.mismatches,
            heatmap=heat,
        )
        return self._finish(f, "", ctx.session, ctx.info, ctx.history)

    def _finish(self, f: Finding, probe: str, session, info, history) -> Finding:
        f.probe = probe
        f.details.setdefault("capture_sizes", list(session.sizes))
        f.details.setdefault("drawn_capture", session is not self.main)
        if self.rtol is not None or self.atol is not None or self.bitwise:
            f.details.setdefault("rtol", self.rtol)
            f.details.setdefault("atol", self.atol)
            f.details.setdefault("bitwise", self.bitwise)
        f.capture_size = info.size
        f.capture_batch = info.batch
        f.batches = list(history)
        f.step = len(history) - 1
        return f


def _heatmap(ctx: StepContext, max_rows: int = 128, max_cols: int = 64) -> dict | None:
    """|graph - eager| over the first output: rows are token slots, padded rows marked."""
    outs = ctx.graph.outputs
    if not outs or not ctx.eager_live or not outs[0].dtype.is_floating_point or outs[0].dim() == 0:
        return None
    full = outs[0].detach().float().reshape(outs[0].shape[0], -1).cpu()
    eager = ctx.eager_live[0].detach().float().reshape(ctx.eager_live[0].shape[0], -1).cpu()
    graph_live = ctx.graph_live[0].detach().float().reshape(ctx.graph_live[0].shape[0], -1).cpu()
    n = min(graph_live.shape[0], eager.shape[0], max_rows)
    if graph_live.shape[1] != eager.shape[1]:
        return None
    cols = graph_live.shape[1]
    step = max(1, -(-cols // max_cols))
    diff = (graph_live[:n] - eager[:n]).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    pooled = [diff[:, i : i + step].amax(dim=1) for i in range(0, cols, step)]
    values = torch.stack(pooled, dim=1).tolist() if pooled else []
    labels = ["r%dt%d" % ctx.batch.token_owner(r) for r in range(n)]
    pad_rows = min(full.shape[0], max_rows) - n
    return {"values": values, "rows": labels, "padded_rows": max(0, pad_rows), "col_step": step}


# -- the public entry point ----------------------------------------------------------------
def _error_class(kind: FindingKind) -> type:
    name = "Finding_" + re.sub(r"\W", "_", kind.value)
    cls = _ERROR_CLASSES.get(name)
    if cls is None:
        cls = type(name, (FindingError,), {})
        _ERROR_CLASSES[name] = cls
    return cls


_ERROR_CLASSES: dict[str, type] = {}


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


def _database(name: str, database: Any):
    if database is not None:
        return None if database is False else database
    if settings.default.database is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    root = os.environ.get("GRAPHSAFE_DB", os.path.join(".hypothesis", "graphsafe"))
    return DirectoryBasedExampleDatabase(os.path.join(root, slug))


def _contract(fn):
    """Contract TypeErrors raised while running the target become one-line TargetErrors."""
    import functools

    @functools.wraps(fn)
    def wrapper(target, *args, **kwargs):
        try:
            return fn(target, *args, **kwargs)
        except TypeError as e:
            if is_contract_error(e):
                raise TargetError(str(e)) from None
            raise

    return wrapper


@_contract
def check(
    target: Any,
    *,
    spec: CaptureSpec | None = None,
    engine: str | Engine = "auto",
    examples: int | None = None,
    steps: int | None = None,
    capture_sizes: Iterable[int] | None = None,
    seed: int | None = None,
    probes: Iterable[str] | str | None = None,
    bitwise: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    device: Any = None,
    database: Any = None,
    report_dir: str | os.PathLike | None = None,
) -> CheckResult:
    """Capture ``target``, replay drawn step sequences, and report capture hazards.

    ``target`` is a :class:`graphsafe.Target` subclass, ``"module:Class"`` or a
    registered name (``graphsafe list``).  ``engine`` is ``"cuda"``,
    ``"emulate"`` or ``"auto"``.  ``examples`` Hypothesis examples of up to
    ``steps`` batches each are run; each failure is shrunk to a minimal step
    sequence.  ``probes`` restricts which finding kinds are reported (default:
    all but ``support-mismatch``).  With ``report_dir``, a report is written for
    every finding.

    Example::

        result = graphsafe.check("flex:fresh_metadata", engine="emulate", examples=20)
        assert result.kinds == {"unpersisted-metadata"}
    """
    t0 = time.perf_counter()
    cls, name = resolve_target(target)
    validate_target(cls)
    spec = spec if spec is not None else (getattr(cls, "default_spec", None) or CaptureSpec())
    if not isinstance(spec, CaptureSpec):
        raise TargetError(f"spec must be a graphsafe.CaptureSpec, got {type(spec).__name__}")
    eng = get_engine(engine, device)
    chosen = probe_mod.resolve_probes(list(probes) if probes is not None and not isinstance(probes, str) else probes)
    enabled = {p.name for p in chosen}
    sizes = tuple(sorted(set(capture_sizes))) if capture_sizes else spec.default_capture_sizes()
    for s in sizes:
        if not isinstance(s, int) or s < 1 or s > spec.max_reqs:
            raise ValueError(f"capture size {s!r} must be an int in [1, spec.max_reqs={spec.max_reqs}]")
    examples = DEFAULT_EXAMPLES if examples is None else int(examples)
    steps = DEFAULT_STEPS if steps is None else int(steps)
    if examples < 1:
        raise ValueError(f"examples must be >= 1, got {examples}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    support = Support(cls.support)
    result = CheckResult(target=name, engine=eng.name, spec=spec, probes=tuple(sorted(enabled)))

    try:
        with np.errstate(all="ignore"):
            main = _session(cls, spec, eng, sizes)
    except TargetRaised as e:
        f = e.finding()
        result.findings.append(_stamp(f, name, eng, spec))
        result.seconds = time.perf_counter() - t0
        return _reports(result, report_dir)
    result.notes.extend(main.notes)
    if main.failure is not None:
        result.findings.append(_stamp(main.failure, name, eng, spec))
        result.seconds = time.perf_counter() - t0
        return _reports(result, report_dir)

    drawn = any(p.drawn_capture for p in chosen)
    runner = _Runner(cls, name, spec, eng, main, enabled, rtol=rtol, atol=atol, bitwise=bitwise)
    counter = {"n": 0, "first": {}, "t": {}}
    t_search = time.perf_counter()

    @settings(
        parent=settings.default,
        max_examples=examples,
        deadline=None,
        database=_database(f"{name}-{eng.name}-{'-'.join(sorted(enabled))}", database),
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=True,
        print_blob=False,
        # no "explain" phase: it re-runs the failing example dozens of times to annotate it
        phases=[p for p in settings.default.phases if p != Phase.explain],
    )
    @given(plan=_plans(spec, support, sizes, drawn, steps))
    def run_examples(plan: Plan) -> None:
        counter["n"] += 1
        f = runner.run(plan)
        if f is not None:
            counter["first"].setdefault(f.kind, counter["n"])
            counter["t"].setdefault(f.kind, time.perf_counter() - t_search)
            raise _error_class(f.kind)(f)

    if seed is not None:
        run_examples = hypothesis_seed(seed)(run_examples)
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
        _stamp(f, name, eng, spec)
        f.examples_to_find = counter["first"].get(f.kind, counter["n"])
        f.seconds_to_find = counter["t"].get(f.kind, 0.0)
        if f.key not in seen:
            seen.add(f.key)
            result.findings.append(f)
    # examples drawn before the first finding (or all of them); later calls are Hypothesis shrinking
    result.examples = min(counter["first"].values(), default=counter["n"])
    result.calls = counter["n"]
    result.steps = runner.steps_run
    if "support-mismatch" in enabled:
        from .probes import support_mismatch

        result.findings.extend(
            _stamp(f, name, eng, spec)
            for f in support_mismatch.run(cls, name, result, spec=spec, engine=eng, examples=examples,
                                          steps=steps, capture_sizes=sizes, seed=seed)
        )
    result.seconds = time.perf_counter() - t0
    return _reports(result, report_dir)


def _stamp(f: Finding, name: str, eng: Engine, spec: CaptureSpec) -> Finding:
    f.target, f.engine, f.spec = name, eng.name, spec
    return f


def _reports(result: CheckResult, report_dir) -> CheckResult:
    if report_dir is None or not result.findings:
        return result
    from .reports import write_report

    for f in result.findings:
        if f.severity == "error":
            f.report_dir = str(write_report(f, report_dir))
    return result


@_contract
def reproduce(
    target: Any,
    steps: Sequence[Batch],
    *,
    spec: CaptureSpec | None = None,
    engine: str | Engine = "auto",
    capture_batch: Batch | None = None,
    capture_size: int | None = None,
    capture_sizes: Iterable[int] | None = None,
    probes: Iterable[str] | str | None = None,
    bitwise: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    device: Any = None,
) -> CheckResult:
    """Run one exact step sequence (no search, no shrinking): what a report's ``repro.py`` calls.

    With ``capture_batch`` the graph is captured with that batch at
    ``capture_size`` (a drawn capture); otherwise with the worst case at every
    capture size.  Returns a :class:`CheckResult` with at most one finding.

    Example::

        r = graphsafe.reproduce("triton_mla:nan_padding", [Batch((1,), (5,), ((1,),), seed=3)], engine="emulate")
        r.ok  # False while the bug is there
    """
    t0 = time.perf_counter()
    cls, name = resolve_target(target)
    validate_target(cls)
    spec = spec if spec is not None else (getattr(cls, "default_spec", None) or CaptureSpec())
    eng = get_engine(engine, device)
    chosen = probe_mod.resolve_probes(list(probes) if probes is not None and not isinstance(probes, str) else probes)
    enabled = {p.name for p in chosen}
    result = CheckResult(target=name, engine=eng.name, spec=spec, probes=tuple(sorted(enabled)))
    steps = [b if isinstance(b, Batch) else Batch.from_dict(b) for b in steps]
    for b in steps:
        spec.validate_batch(b)
    if capture_batch is not None:
        size = capture_size or capture_batch.num_slots
        plan = Plan(tuple(steps), capture_batch, size)
        sizes = (size,)
    else:
        sizes = tuple(sorted(set(capture_sizes))) if capture_sizes else spec.default_capture_sizes()
        plan = Plan(tuple(steps))
    try:
        main = _session(cls, spec, eng, sizes) if capture_batch is None else None
    except TargetRaised as e:
        result.findings.append(_stamp(e.finding(), name, eng, spec))
        return result
    if main is not None and main.failure is not None:
        result.findings.append(_stamp(main.failure, name, eng, spec))
        return result
    runner = _Runner(cls, name, spec, eng, main, enabled, rtol=rtol, atol=atol, bitwise=bitwise)
    f = runner.run(plan)
    if f is not None:
        result.findings.append(_stamp(f, name, eng, spec))
    result.examples, result.steps = 1, runner.steps_run
    result.seconds = time.perf_counter() - t0
    return result

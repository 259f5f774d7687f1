"""One example: replay a plan's steps on the captured graph and compare each with a fresh eager run.

The per-step path (poison, prepare, step probes, replay, compare) is the hot path: capture
happens once per process and size, and diagnosis runs only after a difference was seen.  A large
paged KV cache is compared per step only in the blocks the example can touch, and whole (in
pieces) once at the example's end, so a step costs the same whatever the cache's size.
"""

from __future__ import annotations

import enum
import math
import weakref
from collections.abc import Callable
from typing import Any, Final, Literal

import numpy as np
import torch

from ..capture.compare import Comparator
from ..capture.context import CaptureContext, LearnedWrites, live_rows
from ..capture.policies import POLICIES
from ..capture.session import CaptureSession, as_target_failure, call_target
from ..capture.statics import randomise_static, static_dict
from ..contract import Batch, CaptureSpec, Support
from ..diagnosis import at_stage
from ..diagnosis.context import StepContext, Symptom
from ..diagnosis.loop import diagnose
from ..diagnosis.repair import PreReplay
from ..diagnosis.unreplayable import WITHOUT_REPLAY, diagnose_without_replay
from ..engines import Engine, as_outputs, replay_clock
from ..errors import ContextBroken, ContractError, TargetRaised
from ..findings import Finding, FindingKind, Mismatch
from .plans import Plan

__all__ = ["ExampleRunner", "Symptom", "target_error"]


class _Verdict(enum.Enum):
    GOES_ON = "goes on"


_GOES_ON: Final = _Verdict.GOES_ON  # a step's finding was info: the example goes on


def _decade(m: Mismatch) -> int:
    """The order of magnitude of a mismatch's largest difference (NaN and inf: above every finite one)."""
    return 99 if not math.isfinite(m.max_abs) else (-99 if m.max_abs <= 0 else math.ceil(math.log10(m.max_abs)))


def target_error(e: TargetRaised) -> Finding:
    """The ``target-error`` finding for the target's own exception (one line, whatever it was)."""
    where = e.where or e.method
    msg = e.message
    if e.out_of_memory:
        msg += "; a check holds two instances of the target (graph and eager): about twice its own memory"
    return Finding(
        kind=FindingKind.TARGET_ERROR,
        message=msg,
        where=where,
        error=e.traceback,
        details={"method": e.method, "out_of_memory": e.out_of_memory},
        cause=f"line:{where}",
    )


class ExampleRunner:
    """Runs plans for one phase of a check: on ``main``, the phase's session, or (a plan with a capture
    batch of its own) on a fresh graph captured for the plan, reusing ``known_writes``."""

    def __init__(
        self,
        cls: type,
        name: str,
        spec: CaptureSpec,
        engine: Engine,
        main: CaptureSession | None,
        enabled: set[str],
        comparator: Comparator,
        known_writes: LearnedWrites | None = None,
        support: Support | None = None,
    ):
        self.cls, self.name, self.spec, self.engine, self.main = cls, name, spec, engine, main
        self.support = support
        self.enabled, self.comparator, self.known_writes = enabled, comparator, known_writes
        self.steps_run = 0
        self.infos: list[Finding] = []  # info-severity findings (they do not fail an example)
        #: differences already diagnosed as no error in this runner: (tensor, order of magnitude) for an info finding
        #: (numerics only: a larger difference in that tensor is diagnosed again), (tensor, None) for a kind the
        #: check does not report or a cause an earlier phase reported; a step whose every difference is one of them
        #: goes on undiagnosed
        self.dismissed: set[tuple[str, int | None]] = set()
        self.on_diagnose: Callable[[], None] | None = None  # told before a diagnosis (it re-runs the target)
        #: a step probe's symptom (two replays that differ) explained where this runner first met it, by key: a
        #: race may not show again when the example runs once more (None: no error, or a kind not reported)
        self.first_diagnoses: dict[str, Finding | None] = {}
        #: a step index whose replay faulted or never ended in another process: that step is diagnosed without
        #: replaying it (:mod:`graphsafe.diagnosis.unreplayable`), and the example ends there
        self.unreplayable_step: int | None = None
        self._made: list[
            Any
        ] = []  # weak references to the instances and graphs this runner made (None: not weak-referable)

    def track(self, obj: Any) -> None:
        """Remember ``obj`` (a target instance, a graph) weakly, for :meth:`leftovers`."""
        try:
            self._made.append(weakref.ref(obj))
        except TypeError:  # a class with __slots__ and no __weakref__: whether it is gone cannot be told
            self._made.append(None)

    def leftovers(self) -> bool:
        """Is anything this runner tracked still alive (or untrackable)?  After a phase whose examples all
        passed, nothing is: each instance died with its example, each graph with its session."""
        return any(r is None or r() is not None for r in self._made)

    def run(self, plan: Plan, diagnose: bool = True) -> Finding | Symptom | None:
        """The example's finding, or None.  With ``diagnose=False`` a step whose replay differs from eager ends the
        example with its :class:`Symptom` instead of a diagnosis (a search's shrinking: the cause is decided once,
        on the example that is left); findings that need no diagnosis (capture, step probes, the target's own
        error) are returned either way."""
        before = self.steps_run
        self._diagnose = diagnose
        self.symptom: Symptom | None = None  # the first difference this run met that was not dismissed
        self.diagnosed: Finding | None = None  # the finding this run's diagnosis of a difference made
        try:
            # NaN poison makes the Triton interpreter's numpy warn on every op: expected, silenced
            with torch.no_grad(), np.errstate(all="ignore"):
                return self._run(plan)
        except Exception as e:
            if not self.engine.healthy():  # a device fault of an earlier launch (a replay), not the target's error
                raise self._fault(e, plan, self.steps_run - before) from e
            err = as_target_failure(e, "checking the target's state")  # out of memory: a target error too
            if err is None:
                raise
            f = target_error(err)
            begun = self.steps_run - before  # the last step begun raised (none: setup or capture did)
            f.batches = list(plan.steps[:begun]) if begun else list(plan.steps)
            f.step = begun - 1
            return f

    def _fault(self, e: BaseException, plan: Plan, begun: int) -> ContextBroken:
        """A device fault met while running ``plan`` (``begun`` steps begun): which replay, which example."""
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        what = f"the CUDA context became unusable ({type(e).__name__}: {first}): a kernel faulted"
        step, size = begun - 1, 0
        if begun:
            batch = plan.steps[step]
            size = plan.size or (self.main.size_for(batch.num_reqs) if self.main is not None else 0)
            what += (
                f", most likely the replay of step {step} (an illegal memory access) on the size-{size} graph; "
                f"the step's batch: query_lens={list(batch.query_lens)}, seq_lens={list(batch.seq_lens)}, "
                f"seed={batch.seed}; the example's {len(plan.steps)} step(s) are in this error's steps"
            )
        else:
            what += " before the example's first step (its set-up or capture)"
        return ContextBroken(
            what,
            where=getattr(e, "where", ""),
            steps=[b.to_dict() for b in plan.steps],
            step=step,
            size=size,
            capture=self._capture_of(plan),
        )

    def _capture_of(self, plan: Plan) -> dict:
        """How ``plan``'s graph was captured, for a fresh process to capture it again: the capture policy's name,
        and the drawn capture batch (None: the phase's session, every capture size)."""
        if plan.capture is not None:
            return {"policy": "drawn", "batch": plan.capture.to_dict()}
        return {"policy": self.main.policy.name if self.main is not None else "", "batch": None}

    def _session(self, plan: Plan) -> CaptureSession:
        if plan.capture is None:
            assert self.main is not None, "a plan without its own capture runs on the main session"
            return self.main
        session = CaptureSession(
            self.cls,
            self.spec,
            self.engine,
            (plan.size,),
            policy=POLICIES["drawn"],
            capture_batch=plan.capture,
            known_writes=self.known_writes,
            support=self.support,
        )
        self.track_session(session)
        if self.known_writes is None:  # a check of drawn captures only: later captures reuse what this one learned
            self.known_writes = session.learned_writes()
        return session

    def track_session(self, session: CaptureSession) -> None:
        """Track a session's target instance and graphs (:meth:`track`)."""
        self.track(session.target)
        for graph in session.graphs.values():
            self.track(graph)

    def capture_finding(self, ctx: CaptureContext) -> Finding | None:
        """What the capture probes make of a failed capture (capture failures are always reported)."""
        for probe in at_stage("capture"):
            f = probe.run(ctx)
            if f is not None:
                f.probe = probe.name
                self._describe_capture(f, ctx.session)
                return f
        return None

    def dismiss(self, mismatches: list[Mismatch] | tuple[Mismatch, ...], *, magnitude: bool = False) -> None:
        """Let later steps whose differences are in these tensors (of this order of magnitude, with ``magnitude``)
        go on undiagnosed."""
        self.dismissed |= {(m.tensor, _decade(m) if magnitude else None) for m in mismatches}

    def dismiss_symptom(self, symptom: Symptom) -> None:
        """Let later examples with this symptom go undiagnosed: a replay-against-eager symptom's tensors (as
        :meth:`dismiss`: the example goes on), or two replays that differ (the example ends there, as one whose race
        was explained: what a racing replay then gives against eager is no evidence of another cause)."""
        if symptom.of == "eager":  # (its key is its first mismatch's tensor)
            self.dismiss(symptom.mismatches)
        else:
            self.dismissed.add((symptom.key, None))

    def _wants_diagnosis(self, symptom: Symptom) -> bool:
        """Should a step probe explain ``symptom`` now: not when dismissed; when this run diagnoses, or where the
        runner first meets it (its explanation kept in :attr:`first_diagnoses` for the search).  A yes is a
        diagnosis (:attr:`on_diagnose` is told)."""
        if (symptom.key, None) in self.dismissed:
            return False
        wanted = self._diagnose or symptom.key not in self.first_diagnoses
        if wanted and self.on_diagnose is not None:
            self.on_diagnose()
        return wanted

    def _dismissed(self, mismatches: list[Mismatch]) -> bool:
        return all({(m.tensor, None), (m.tensor, _decade(m))} & self.dismissed for m in mismatches)

    def _run(self, plan: Plan) -> Finding | Symptom | None:
        session = self._session(plan)
        try:
            return self._replay(plan, session)
        finally:
            if session is not self.main:  # a drawn capture: its graph and instance go before the next example's
                session.close()

    def _replay(self, plan: Plan, session: CaptureSession) -> Finding | Symptom | None:
        if session.capture_error is not None:
            return self.capture_finding(session.capture_error)
        if not plan.steps:
            return None
        seed = plan.steps[0].seed
        session.reset(seed)
        g = session.target
        eager = self.cls()
        self.track(eager)
        call_target("setup(spec, device) [eager]", eager.setup, self.spec, self.engine.device)
        session.share_constants(eager)
        randomise_static(eager, seed, like=g)  # g's statics hold the seed's values since reset()
        history: list[Batch] = []
        padded: list[Batch] = []
        region = self.comparator.region(static_dict(g), [*plan.steps, *(i.batch for i in session.infos.values())])
        ctx = None
        replay_clock.example(plan.steps, lambda: self._capture_of(plan))  # a sandbox's parent names a hung replay
        for batch in plan.steps:
            size = session.size_for(batch.num_reqs)
            info = session.infos[size]
            if batch.seed == info.batch.seed:
                raise AssertionError("graphsafe bug: a replayed batch reuses the capture batch's seed (inputs)")
            if len(history) == self.unreplayable_step:
                return self._without_replay(session, size, [*history, batch], [*padded, batch.padded(size)], seed)
            pb = batch.padded(size)
            replay_clock.step(len(history))
            history.append(batch)
            padded.append(pb)
            self.steps_run += 1

            ctx = self._prepared(session, size, list(history), list(padded), seed, region=region)
            if self._diagnose:  # the buffers the graph reads as this replay will: the repair experiment's start
                ctx.before_replay = PreReplay(ctx)
            ctx.wants_diagnosis = self._wants_diagnosis
            for probe in at_stage("step"):
                f = probe.run(ctx)
                seen, ctx.symptom = ctx.symptom, None
                if seen is not None and (seen.key, None) in self.dismissed:
                    return None  # explained before as no error or a cause reported already: the example ends here
                if seen is not None and not self._diagnose:  # shrinking: the search goes on the symptom
                    if f is not None:  # explained where this runner first met it
                        f = self._finish(f, probe.name, ctx)
                        self.first_diagnoses[seen.key] = f if f.kind.value in self.enabled else None
                    self.symptom = self.symptom or seen
                    return seen
                if f is not None:  # explained: reported, or the check does not report this kind
                    if f.kind.value not in self.enabled:
                        return None
                    f = self._finish(f, probe.name, ctx)
                    if seen is not None:  # the symptom's diagnosis: raised as the symptom the search shrank on
                        self.symptom, self.diagnosed = self.symptom or seen, f
                    return f
            # Wait for the replay here, although the clones and the eager run would queue behind it: a
            # device fault (an illegal address, a trap) then surfaces in the replay, not in the target's
            # eager prepare() where it would pass for the target's own error; and nothing the graph
            # instance queued (a non-blocking copy from a pinned host buffer) is still pending when the
            # eager instance's prepare() writes host memory the two may share (a module-level buffer).
            live_g = ctx.replayed if ctx.replayed is not None else ctx.replay_live()

            call_target("prepare(batch) [eager]", eager.prepare, batch)
            out_e = call_target("forward() [eager]", eager.forward)
            try:
                as_outputs(out_e)
            except ContractError as e:
                raise ContractError(f"{e} (eager instance)") from None
            live_e = live_rows(eager, out_e, batch)
            static_g, static_e = static_dict(g), static_dict(eager)
            ctx.graph_live, ctx.eager_live, ctx.graph_static, ctx.eager_static = live_g, live_e, static_g, static_e
            mism = self.comparator.step(live_g, live_e, static_g, static_e, batch, region)
            if mism:
                diagnosed = self._diagnosed(ctx, mism)
                if diagnosed is not _GOES_ON:
                    return diagnosed
        if region is not None and ctx is not None:  # the steps compared regions: now everything, once
            mism = self.comparator.statics(ctx.graph_static, ctx.eager_static, ctx.batch)
            if mism:
                diagnosed = self._diagnosed(ctx, mism)
                return None if diagnosed is _GOES_ON else diagnosed
        return None

    def _prepared(
        self, session: CaptureSession, size: int, history: list[Batch], padded: list[Batch], seed: int, **more: Any
    ) -> StepContext:
        """The graph instance poisoned and prepared for the last step of ``padded`` (on the graph of ``size``); that
        step's context."""
        session.poison()
        call_target("prepare(batch)", session.target.prepare, padded[-1])
        return StepContext(
            target_cls=self.cls,
            target_name=self.name,
            spec=self.spec,
            engine=self.engine,
            session=session,
            graph=session.graphs[size],
            info=session.infos[size],
            history=history,
            padded=padded,
            seed=seed,
            comparator=self.comparator,
            **more,
        )

    def _without_replay(
        self, session: CaptureSession, size: int, history: list[Batch], padded: list[Batch], seed: int
    ) -> Finding | None:
        """The last step of ``history``, whose replay faulted or never ended elsewhere: prepared, its step probes
        and diagnosis run without replaying the graph (:func:`diagnose_without_replay`; those probes run their own
        fresh eager instances, so this step's eager reference is not needed); its finding, or None when nothing
        that needs no replay explains it."""
        ctx = self._prepared(session, size, history, padded, seed, unreplayable=True)
        self.steps_run += 1
        for step_probe in WITHOUT_REPLAY["step"]:
            f = step_probe.run(ctx)
            if f is not None:
                return self._finish(f, step_probe.name, ctx)
        total = sum(t.numel() for t in live_rows(session.target, ctx.graph.returned, ctx.padded_batch))
        ctx.mismatches = [Mismatch("replay", total, total, math.inf, math.inf)]  # no replay result: every value
        f, probe = diagnose_without_replay(ctx)
        return None if f is None else self._finish(f, probe, ctx)

    def _diagnosed(self, ctx: StepContext, mism: list) -> Finding | Symptom | None | Literal[_Verdict.GOES_ON]:
        """The finding for a step that differed (its :class:`Symptom` when this run does not diagnose); None when
        the check does not report its kind; ``_GOES_ON`` for an info finding (kept; the example goes on) or a
        difference diagnosed as no error before."""
        if self._dismissed(mism):
            return _GOES_ON
        symptom = Symptom(mism[0].tensor, tuple(mism), ctx.step_index)
        if self.symptom is None:
            self.symptom = symptom
        if not self._diagnose:
            return symptom
        ctx.mismatches = mism
        if self.on_diagnose is not None:
            self.on_diagnose()
        f, probe = diagnose(ctx)
        if probe and probe not in self.enabled:
            self.dismiss(mism)
            return None  # explained by a probe this check does not report
        if f.severity != "error":  # worth knowing, not a failure
            self.infos.append(self._finish(f, probe, ctx))
            self.dismiss(mism, magnitude=True)
            return _GOES_ON
        self.diagnosed = self._finish(f, probe, ctx)
        return self.diagnosed

    @staticmethod
    def _describe_capture(f: Finding, session: CaptureSession) -> None:
        policy = session.policy
        f.details.setdefault("capture_sizes", list(session.sizes))
        f.details.setdefault("capture_policy", policy.name)
        f.details.setdefault("capture_order", "ascending" if policy.ascending else "descending")
        f.details.setdefault("drawn_capture", policy.batch is None)

    def _finish(self, f: Finding, probe: str, ctx: StepContext) -> Finding:
        f.probe = probe
        self._describe_capture(f, ctx.session)
        t = self.comparator.tolerance
        if not t.is_default:
            f.details.setdefault("rtol", t.rtol)
            f.details.setdefault("atol", t.atol)
            f.details.setdefault("bitwise", t.bitwise)
        f.capture_size = ctx.info.size
        f.capture_batch = ctx.info.batch
        f.batches = list(ctx.history)
        f.step = len(ctx.history) - 1
        return f

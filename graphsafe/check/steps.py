"""One example: replay a plan's steps on the captured graph and compare each with a fresh eager run.

The per-step path (poison, prepare, step probes, replay, compare) is the hot path: capture
happens once per process and size, and diagnosis runs only after a difference was seen.  A large
paged KV cache is compared per step only in the blocks the example can touch, and whole (in
pieces) once at the example's end, so a step costs the same whatever the cache's size.
"""

from __future__ import annotations

import numpy as np
import torch

from ..capture.compare import Comparator
from ..capture.context import CaptureContext, StepContext, live_rows
from ..capture.ledger import poison_floats, storages_of
from ..capture.session import CaptureSession, as_target_failure, call_target
from ..capture.statics import randomise_static, static_dict
from ..contract import Batch, CaptureSpec
from ..engines import Engine, as_outputs
from ..errors import ContractError, TargetRaised
from ..findings import Finding, FindingKind
from ..probes import at_stage
from .diagnose import diagnose
from .plans import Plan

__all__ = ["ExampleRunner", "target_error"]


def target_error(e: TargetRaised) -> Finding:
    """The ``target-error`` finding for the target's own exception (one line, whatever it was)."""
    msg = e.message
    if e.out_of_memory:
        msg += "; a check holds two instances of the target (graph and eager): about twice its own memory"
    return Finding(kind=FindingKind.TARGET_ERROR, message=msg, where=e.where or e.method, error=e.traceback,
                   details={"method": e.method, "out_of_memory": e.out_of_memory})


class ExampleRunner:
    """Runs plans for one check; ``main`` is the worst-case capture session every plan without a
    capture batch of its own replays on."""

    def __init__(self, cls: type, name: str, spec: CaptureSpec, engine: Engine, main: CaptureSession | None,
                 enabled: set[str], comparator: Comparator):
        self.cls, self.name, self.spec, self.engine, self.main = cls, name, spec, engine, main
        self.enabled, self.comparator = enabled, comparator
        self.steps_run = 0

    def run(self, plan: Plan) -> Finding | None:
        """The example's finding, or None."""
        try:
            # NaN poison makes the Triton interpreter's numpy warn on every op: expected, silenced
            with torch.no_grad(), np.errstate(all="ignore"):
                return self._run(plan)
        except Exception as e:
            err = as_target_failure(e, "checking the target's state")
            if err is None:
                raise
            f = target_error(err)
            f.batches = list(plan.steps)
            return f

    def _session(self, plan: Plan) -> CaptureSession:
        if plan.capture is None:
            return self.main
        known = self.main.learned_writes() if self.main is not None else None
        return CaptureSession(self.cls, self.spec, self.engine, (plan.size,), capture_batch=plan.capture,
                              known_writes=known, statics_of=self.main.target if self.main is not None else None)

    def capture_finding(self, ctx: CaptureContext) -> Finding | None:
        """What the capture probes make of a failed capture (capture failures are always reported)."""
        for probe in at_stage("capture"):
            f = probe.run(ctx)
            if f is not None:
                f.probe = probe.name
                f.details.setdefault("capture_sizes", list(ctx.session.sizes))
                f.details.setdefault("drawn_capture", ctx.session is not self.main)
                return f
        return None

    def _run(self, plan: Plan) -> Finding | None:
        session = self._session(plan)
        if session.capture_error is not None:
            return self.capture_finding(session.capture_error)
        if not plan.steps:
            return None
        seed = plan.steps[0].seed
        session.reset(seed)
        g = session.target
        eager = self.cls()
        call_target("setup(spec, device) [eager]", eager.setup, self.spec, self.engine.device)
        session.share_constants(eager)
        randomise_static(eager, seed, like=g)  # g's statics hold the seed's values since reset()
        history: list[Batch] = []
        padded: list[Batch] = []
        region = self.comparator.region(static_dict(g), [*plan.steps, *(i.batch for i in session.infos.values())])
        ctx = None
        for batch in plan.steps:
            size = session.size_for(batch.num_reqs)
            graph, info = session.graphs[size], session.infos[size]
            if batch.seed == info.batch.seed:
                raise AssertionError("graphsafe bug: a replayed batch reuses the capture batch's seed (inputs)")
            pb = batch.padded(size)
            history.append(batch)
            padded.append(pb)
            self.steps_run += 1

            poison_floats(storages_of(g, session.unpoisoned).values())
            call_target("prepare(batch)", g.prepare, pb)
            ctx = StepContext(
                target_cls=self.cls, target_name=self.name, spec=self.spec, engine=self.engine, session=session,
                graph=graph, info=info, history=list(history), padded=list(padded), seed=seed,
                comparator=self.comparator, region=region,
            )
            for probe in at_stage("step"):
                f = probe.run(ctx)
                if f is not None:  # explained: reported, or the check does not report this kind
                    return self._finish(f, probe.name, ctx) if probe.name in self.enabled else None
            # Wait for the replay here, although the clones and the eager run would queue behind it: a
            # device fault (an illegal address, a trap) then surfaces in the replay, not in the target's
            # eager prepare() where it would pass for the target's own error.
            live_g = ctx.replay_live()

            call_target("prepare(batch) [eager]", eager.prepare, batch)
            out_e = call_target("forward() [eager]", eager.forward)
            try:
                outs_e = as_outputs(out_e)
            except ContractError as e:
                raise ContractError(f"{e} (eager instance)") from None
            live_e = live_rows(eager, outs_e, batch)
            static_g, static_e = static_dict(g), static_dict(eager)
            ctx.graph_live, ctx.eager_live, ctx.graph_static, ctx.eager_static = live_g, live_e, static_g, static_e
            mism = self.comparator.step(live_g, live_e, static_g, static_e, batch, region)
            if mism:
                return self._diagnosed(ctx, mism)
        if region is not None and ctx is not None:  # the steps compared regions: now everything, once
            mism = self.comparator.statics(ctx.graph_static, ctx.eager_static, ctx.batch)
            if mism:
                return self._diagnosed(ctx, mism)
        return None

    def _diagnosed(self, ctx: StepContext, mism: list) -> Finding | None:
        ctx.mismatches = mism
        f, probe = diagnose(ctx)
        if probe and probe not in self.enabled:
            return None  # explained by a probe this check does not report
        return self._finish(f, probe, ctx)

    def _finish(self, f: Finding, probe: str, ctx: StepContext) -> Finding:
        f.probe = probe
        f.details.setdefault("capture_sizes", list(ctx.session.sizes))
        f.details.setdefault("drawn_capture", ctx.session is not self.main)
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

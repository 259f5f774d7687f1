"""Evidence several diagnosis probes share, computed once per failing step and only on demand.

Who wrote every buffer the graph reads (the write ledger around capture, and this step's
``prepare`` re-run over poisoned copies), and eager re-runs of the example's padded steps
without graphs (with the instance's own history, and of the failing step alone).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..engines import as_outputs
from ..engines.recording import Launch, Override, Recorder
from ..findings import Mismatch
from .context import StepContext, live_rows
from .ledger import poison_floats, prepare_writes, storages_of
from .session import call_target
from .statewalk import paths_by_storage, storage_key, walk
from .statics import randomise_static, static_dict, static_keys

__all__ = ["Evidence", "ReadOrigin", "ScratchRun"]


@dataclass
class ReadOrigin:
    """A buffer the graph reads that nothing in this step writes, and who wrote it last."""

    key: int
    path: str
    origin: str  # "warmup-only", "earlier-prepare", "never-written"
    floating: bool


@dataclass
class ScratchRun:
    """An eager run without graphs: its live outputs, where it differs from the eager reference of the
    step (outputs and static state), its launches and its buffers after prepare.  The instance itself
    is dropped once compared: diagnosis holds at most one extra copy of the target's state at a time."""

    live: list[torch.Tensor]
    mismatches: list[Mismatch]
    launches: list[Launch]
    buffers_after_prepare: dict[str, torch.Tensor]
    static: dict[str, torch.Tensor] | None = None  # the run's static state, when asked to keep it
    overridden: int = 0  # host values the last forward ran with overridden (see scratch_overridden)


class Evidence:
    """Facts about one failing step (see the module docstring); each computed on first use."""

    def __init__(self, ctx: StepContext):
        self.ctx = ctx

    # -- who wrote what the graph reads --------------------------------------------
    @functools.cached_property
    def graph_read_tensors(self) -> dict[int, torch.Tensor]:
        """Buffers the graph reads, not static, still reachable from the target."""
        g = self.ctx.session.target
        reachable = storages_of(g, exclude=self.ctx.session.static_keys)
        ext = self.ctx.graph.recording.external
        return {k: t for k, t in reachable.items() if k in ext}

    @functools.cached_property
    def prepare_written(self) -> set[int]:
        g = self.ctx.session.target
        padded = self.ctx.padded[-1]
        return prepare_writes(self.graph_read_tensors, lambda: g.prepare(padded))

    @functools.cached_property
    def unwritten_reads(self) -> list[ReadOrigin]:
        """Buffers the graph reads that neither this step's prepare nor the graph writes (the graph's writes
        learned at capture, then proved by replaying over the candidates: a kernel whose writes were not
        learned still writes them)."""
        info, ctx = self.ctx.info, self.ctx
        out = []
        candidates = {k for k, buf in ctx.graph.recording.external.items()
                      if k not in ctx.session.static_keys and k not in info.graph_written and buf.alive()
                      and k not in self.prepare_written}
        replay_written = self._replay_writes(candidates)
        for key, buf in ctx.graph.recording.external.items():
            if key not in candidates or key in replay_written:
                continue
            path = ", ".join(info.paths.get(key, [])) or f"<unreachable buffer at {hex(buf.address)}>"
            floating = "float" in buf.dtype
            if key in info.warmup_written and key not in info.prepare_written:
                origin = "warmup-only"
            elif key in info.prepare_written:
                origin = "earlier-prepare"
            else:
                origin = "never-written"
            out.append(ReadOrigin(key, path, origin, floating))
        return out

    def _replay_writes(self, keys: set[int]) -> set[int]:
        """Which of ``keys`` a replay of the graph writes, whatever it writes: replayed over two fills."""
        tensors = {k: t for k, t in self.graph_read_tensors.items() if k in keys}
        if not tensors:
            return set()
        graph = self.ctx.graph
        return prepare_writes(tensors, lambda: (graph.replay(), self.ctx.engine.synchronize()))

    def rebound(self, keys: list[int]) -> list[str]:
        """Where this step's metadata went: capture-time paths of ``keys`` that now hold another tensor."""
        now = {p: k for k, ps in paths_by_storage(self.ctx.session.target).items() for p in ps}
        out = []
        for key in keys:
            for p in self.ctx.info.paths.get(key, []):
                if p in now and now[p] != key:
                    out.append(f"{p} (now a new tensor at {hex(now[p])})")
        return out

    # -- the same padded steps, eagerly, without graphs -------------------------------
    def _scratch(self, history: bool, padded: bool = True, overrides: tuple[Override, ...] = (),
                 keep_static: bool = False) -> ScratchRun:
        ctx = self.ctx
        inst = ctx.target_cls()
        call_target("setup(spec, device) [diagnosis]", inst.setup, ctx.spec, ctx.engine.device)
        statics = static_keys(inst) | ctx.session.share_constants(inst)
        steps = ctx.padded if padded else ctx.history
        steps = steps if history else steps[-1:]
        if history:
            # the graph instance's own history: every capture (largest first) before the example
            for size in sorted(ctx.session.infos, reverse=True):
                call_target("prepare(batch) [diagnosis]", inst.prepare, ctx.session.infos[size].batch)
                call_target("forward() [diagnosis]", inst.forward)
        randomise_static(inst, ctx.seed)  # as the graph instance's reset: after the captures, at the example's start
        launches: list[Launch] = []
        bufs: dict[str, torch.Tensor] = {}
        out = None
        for i, pb in enumerate(steps):
            poison_floats(storages_of(inst, exclude=statics).values())
            call_target("prepare(batch) [diagnosis]", inst.prepare, pb)
            if i == len(steps) - 1:
                bufs = {p: t.clone() for p, t in walk(inst) if storage_key(t) not in statics}
                with Recorder("observe", overrides=overrides) as rec:
                    out = call_target("forward() [diagnosis]", inst.forward)
                launches = rec.launches
            else:
                out = call_target("forward() [diagnosis]", inst.forward)
        as_outputs(out)  # checked: a tensor or a tuple of tensors
        live = [t.clone() for t in live_rows(inst, out, steps[-1])]
        mism = ctx.comparator.step(live, ctx.eager_live, static_dict(inst), ctx.eager_static, ctx.batch)
        ctx.engine.synchronize()
        return ScratchRun(live, mism, launches, bufs, static_dict(inst) if keep_static else None, rec.overridden)

    def scratch_overridden(self, overrides: tuple[Override, ...]) -> ScratchRun:
        """:attr:`scratch` (this example's padded steps, eagerly) with the last forward's Triton launches run
        at ``overrides`` (the values the capture froze), its static state kept: what the graph would give
        if the frozen values were its only difference from eager."""
        return self._scratch(history=True, overrides=overrides, keep_static=True)

    @functools.cached_property
    def scratch(self) -> ScratchRun:
        """Eager run of this example's padded steps (with the same poisoning), no graph."""
        return self._scratch(history=True)

    @functools.cached_property
    def fresh_scratch(self) -> ScratchRun:
        """Eager run of only this step, padded, on a fresh instance (no history)."""
        return self._scratch(history=False)

    @functools.cached_property
    def capture_batch_launches(self) -> list[Launch]:
        """What an eager forward() launches for the capture batch itself, on a fresh instance run the way the
        capture ran (prepare, warm-up, pre-screen, then the recorded call): the control for a launch diff."""
        ctx = self.ctx
        inst = ctx.target_cls()
        call_target("setup(spec, device) [diagnosis]", inst.setup, ctx.spec, ctx.engine.device)
        ctx.session.share_constants(inst)
        randomise_static(inst, ctx.seed)
        call_target("prepare(batch) [diagnosis]", inst.prepare, ctx.info.batch)
        for _ in range(2):
            call_target("forward() [diagnosis]", inst.forward)
        with Recorder("observe") as rec:
            call_target("forward() [diagnosis]", inst.forward)
        ctx.engine.synchronize()
        return rec.launches

    @functools.cached_property
    def fresh_unpadded_scratch(self) -> ScratchRun:
        """Eager run of only this step, unpadded but poisoned like the others, on a fresh instance."""
        return self._scratch(history=False, padded=False)

    def scratch_mismatches(self, run: ScratchRun) -> list[Mismatch]:
        """Where an eager re-run differs from the eager reference of this step."""
        return run.mismatches

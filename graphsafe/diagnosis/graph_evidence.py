"""The graph itself as evidence for a failing step: this step's batch captured into a scratch graph and diffed,
node by node, with the graph that replays.

On a fresh instance of the target (the check's constants shared), this step's padded batch is captured after
``prepare`` and a warm-up, as the session captures.  A control, once per replaying graph, captures the capture
batch the same way: whatever differs between two captures of one batch is noise, and a control whose node
sequence differs says capturing itself changes the graph.  What differs beyond the noise is what the replaying graph froze: a kernel
sequence (a branch), a grid, a parameter word.  When only values differ, the scratch graph is replayed over the
example's steps (the earlier ones eagerly) and compared with the eager reference: if it agrees, the frozen values
are the whole difference between the graph and eager (the numerics-only rule's proof where an eager run cannot
be given the captured values back).  CUDA engine with the graph reader only; computed once per failing step,
and only where the graph holds kernels no recorded launch accounts for (:func:`unseen_kernels`), unless the
numerics rule asks for its proof.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from ..capture.context import live_rows
from ..capture.graph_diff import diff_graphs, noise_of
from ..capture.graph_map import map_graph, sizes_of
from ..capture.ledger import poison_floats, storages_of
from ..capture.session import call_target
from ..capture.statewalk import paths_by_storage
from ..capture.statics import randomise_static, static_dict, static_keys
from ..engines.graph_reader import demangle
from .context import StepContext

__all__ = ["GraphEvidence", "graph_evidence", "recaptured_replays_as_eager", "recorded_kernel", "triton_names"]


@dataclass
class GraphEvidence:
    """What the scratch captures showed (see the module docstring)."""

    diffs: list[dict] = field(default_factory=list)  # this batch's graph against the replaying one, noise left out
    comparable: bool = False  # the control captured the same node sequence: the diffs mean something
    correct: bool | None = None  # this batch's graph replayed as eager did (None: not tried)
    notes: list[str] = field(default_factory=list)

    @property
    def values_only(self) -> bool:
        return bool(self.diffs) and not any(d["kind"] == "branch" for d in self.diffs)


_MADE: weakref.WeakKeyDictionary[Any, GraphEvidence] = weakref.WeakKeyDictionary()
#: per replaying graph (its recording): the control's noise, or None when two captures of one batch launch
#: different kernels; a property of the graph, so the failing steps of every example on it ask once
_CONTROL: weakref.WeakKeyDictionary[Any, frozenset | None] = weakref.WeakKeyDictionary()
#: kernels of torch's own libraries (the aten dispatcher launched them: the recorder saw their arguments)
_TORCH_KERNELS = (
    "at::",
    "c10::",
    "pytorch_flash::",
    "fmha",
    "cub::",
    "cutlass",
    "nvjet",
    "gemm",
    "gemv",
    "splitKreduce",
    "cublas",
    "xmma",
    "ampere_",
)


def unseen_kernels(ctx: StepContext) -> list[str]:
    """Kernels of the replaying graph that no recorded launch accounts for: neither a Triton launch the recorder
    saw (by name) nor a kernel of torch's own libraries (which aten ops launch).  Where there are none, the
    recorded launches already say every host value the graph holds, and a scratch capture would add nothing."""
    triton = triton_names(ctx.info.launches)
    return [node.label for node in ctx.info.graph_map.read.kernels() if not recorded_kernel(node, triton)]


def triton_names(launches: Any) -> set[str]:
    """The names of the Triton kernels among ``launches`` (recorded launches), for :func:`recorded_kernel`."""
    return {launch.name for launch in launches if launch.kind == "triton"}


def recorded_kernel(node: Any, triton: set[str]) -> bool:
    """Is graph kernel ``node`` one a recorded launch accounts for: a Triton kernel the recorder saw (``triton``:
    :func:`triton_names`), or a kernel of torch's own libraries (an aten op the recorder saw launch it)?"""
    return node.label in triton or node.name in triton or any(m in demangle(node.name) for m in _TORCH_KERNELS)


def graph_evidence(ctx: StepContext, *, needed: bool = False) -> GraphEvidence | None:
    """The graph evidence of ``ctx``'s failing step (computed on first use), or None without a graph reader, or
    when every kernel of the graph is one the recorder saw (unless ``needed``: the numerics rule's proof)."""
    if ctx.info.graph_map is None or ctx.evidence is None:
        return None
    made = _MADE.get(ctx.evidence)
    if made is None:
        if not needed and not unseen_kernels(ctx):
            return None
        made = _MADE[ctx.evidence] = _compute(ctx)
    return made


def _capture(ctx: StepContext, batch: Any) -> tuple[Any, Any, Any, set[int]]:
    """A fresh instance of the target (the check's constants shared), ``batch`` prepared, warmed up and captured
    as the session captures: ``(instance, graph, graph map, its statics)``."""
    eng = ctx.engine
    inst = ctx.target_cls()
    call_target("setup(spec, device) [diagnosis]", inst.setup, ctx.spec, eng.device)
    statics = static_keys(inst) | ctx.session.share_constants(inst)
    call_target("prepare(batch) [diagnosis]", inst.prepare, batch)
    call_target("forward() [diagnosis]", eng.rehearse, inst.forward)
    eng.prescreen(inst.forward)  # a host sync is named here, before a capture could break the context
    g = eng.capture(inst.forward, pool=eng.new_pool())
    g.size = ctx.info.size
    if g.read is None:
        raise RuntimeError("a scratch graph could not be read")
    gmap = map_graph(g.read, sizes_of(storages_of(inst, set())), paths_by_storage(inst), g.space)
    g.space = None
    return inst, g, gmap, statics


def recaptured_replays_as_eager(ctx: StepContext) -> bool | None:
    """The re-capture experiment, on either engine: does a graph captured for this step's batch (a fresh instance,
    prepared, rehearsed and captured as the session captures) replay, at the end of this example's steps, as the
    eager reference did?  Then whatever the replaying graph froze differently (a branch, a split count) is the
    whole difference.  None when this batch cannot be captured or replayed (no proof).  Once per failing step; the
    re-capture's recorded launches are kept in the evidence's memo (``recaptured_launches``)."""
    ev = ctx.evidence
    if ev is None:
        return None
    if "recaptured" not in ev.memo:
        eng = ctx.engine
        try:
            inst = ctx.target_cls()
            call_target("setup(spec, device) [diagnosis]", inst.setup, ctx.spec, eng.device)
            statics = static_keys(inst) | ctx.session.share_constants(inst)
            call_target("prepare(batch) [diagnosis]", inst.prepare, ctx.padded_batch)
            call_target("forward() [diagnosis]", eng.rehearse, inst.forward)
            eng.prescreen(inst.forward)
            graph = eng.capture(inst.forward, pool=eng.new_pool())
            ev.memo["recaptured_launches"] = list(graph.recording.launches)
            ev.memo["recaptured"] = _replays_as_eager(ctx, inst, graph, statics)
        except Exception:  # noqa: BLE001 - the proof is optional: a batch this target cannot capture gives none
            ev.memo["recaptured"] = None
    return ev.memo["recaptured"]


def _compute(ctx: StepContext) -> GraphEvidence:
    out = GraphEvidence()
    key = ctx.graph.recording
    try:
        if key not in _CONTROL:
            _, _, control_map, _ = _capture(ctx, ctx.info.batch)
            control = diff_graphs(ctx.info.graph_map, control_map)
            _CONTROL[key] = None if any(d["kind"] == "branch" for d in control) else frozenset(noise_of(control))
        noise = _CONTROL[key]
        if noise is None:
            out.notes.append("two captures of the capture batch launch different kernels: capturing changes the graph")
            return out
        inst, graph, gmap, statics = _capture(ctx, ctx.padded_batch)
    except Exception as e:  # noqa: BLE001 - the evidence is optional: a batch this target cannot capture gives none
        out.notes.append(f"this step's batch could not be captured for comparison ({type(e).__name__}: {e})")
        return out
    out.comparable = True
    out.diffs = diff_graphs(ctx.info.graph_map, gmap, noise)
    if out.values_only:
        try:
            out.correct = _replays_as_eager(ctx, inst, graph, statics)
        except Exception as e:  # noqa: BLE001 - no proof then, and the finding stays an error
            out.notes.append(f"this batch's graph could not be replayed ({type(e).__name__}: {e})")
    return out


def _replays_as_eager(ctx: StepContext, inst: Any, graph: Any, statics: set[int]) -> bool:
    """Does ``graph`` (captured for this step's batch on ``inst``), replayed at the end of this example's steps
    (the earlier ones run eagerly, poisoned as the check poisons), give what the eager reference gave?"""
    randomise_static(inst, ctx.seed)
    for pb in ctx.padded[:-1]:
        poison_floats(storages_of(inst, exclude=statics).values())
        call_target("prepare(batch) [diagnosis]", inst.prepare, pb)
        call_target("forward() [diagnosis]", inst.forward)
    poison_floats(storages_of(inst, exclude=statics).values())
    call_target("prepare(batch) [diagnosis]", inst.prepare, ctx.padded_batch)
    graph.replay()
    ctx.engine.synchronize()
    live = [t.clone() for t in live_rows(inst, graph.returned, ctx.padded_batch)]
    return not ctx.comparator.step(live, ctx.eager_live, static_dict(inst), ctx.eager_static, ctx.batch)

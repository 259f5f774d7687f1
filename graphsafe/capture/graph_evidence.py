"""The graph itself as evidence for a failing step: this step's batch captured into a scratch graph and diffed,
node by node, with the graph that replays.

On a fresh instance of the target (the check's constants shared), the capture batch is captured first (the
control: whatever differs between two captures of one batch is noise, and a control whose node sequence
differs says capturing itself changes the graph), then this step's padded batch, each after ``prepare`` and a
warm-up, as the session captures.  What differs beyond the noise is what the replaying graph froze: a kernel
sequence (a branch), a grid, a parameter word.  When only values differ, the scratch graph is replayed over the
example's steps (the earlier ones eagerly) and compared with the eager reference: if it agrees, the frozen values
are the whole difference between the graph and eager (the numerics-only rule's proof where an eager run cannot
be given the captured values back).  CUDA engine with the graph reader only; computed once per failing step.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from .context import StepContext, live_rows
from .graph_diff import diff_graphs, noise_of
from .graph_map import map_graph, sizes_of
from .ledger import poison_floats, storages_of
from .session import call_target
from .statewalk import paths_by_storage
from .statics import randomise_static, static_dict, static_keys

__all__ = ["GraphEvidence", "graph_evidence"]


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


def graph_evidence(ctx: StepContext) -> GraphEvidence | None:
    """The graph evidence of ``ctx``'s failing step (computed on first use), or None without a graph reader."""
    if ctx.info.graph_map is None or ctx.evidence is None:
        return None
    made = _MADE.get(ctx.evidence)
    if made is None:
        made = _MADE[ctx.evidence] = _compute(ctx)
    return made


def _compute(ctx: StepContext) -> GraphEvidence:
    eng, out = ctx.engine, GraphEvidence()
    inst = ctx.target_cls()
    try:
        call_target("setup(spec, device) [diagnosis]", inst.setup, ctx.spec, eng.device)
        statics = static_keys(inst) | ctx.session.share_constants(inst)
        pool = eng.new_pool()
        maps, graphs = [], []
        for batch in (ctx.info.batch, ctx.padded_batch):
            call_target("prepare(batch) [diagnosis]", inst.prepare, batch)
            call_target("forward() [diagnosis]", eng.rehearse, inst.forward)
            eng.prescreen(inst.forward)  # a host sync is named here, before a capture could break the context
            g = eng.capture(inst.forward, pool=pool)
            g.size = ctx.info.size
            if g.read is None:
                out.notes.append("a scratch graph could not be read")
                return out
            maps.append(map_graph(g.read, sizes_of(storages_of(inst, set())), paths_by_storage(inst), g.space))
            g.space = None
            graphs.append(g)
    except Exception as e:  # noqa: BLE001 - the evidence is optional: a batch this target cannot capture gives none
        out.notes.append(f"this step's batch could not be captured for comparison ({type(e).__name__}: {e})")
        return out
    control = diff_graphs(ctx.info.graph_map, maps[0])
    if any(d["kind"] == "branch" for d in control):
        out.notes.append("two captures of the capture batch launch different kernels: capturing changes the graph")
        return out
    out.comparable = True
    out.diffs = diff_graphs(ctx.info.graph_map, maps[1], noise_of(control))
    if out.values_only:
        try:
            out.correct = _replays_as_eager(ctx, inst, graphs[1], statics)
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

"""What the diagnosis probes look at, computed once per failing step and shared.

A :class:`StepContext` describes the step whose replay differed from eager;
``Evidence`` computes, on first use, the facts several probes need: which
buffers this step's prepare wrote, who wrote every buffer the graph reads, and
an eager re-run of the same padded steps without graphs.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from ..contract import Batch, CaptureSpec, Target, contract_error
from ..engines.base import Graph, as_outputs
from ..engines.recording import Launch, Recorder
from ..findings import Mismatch
from .ledger import poison_floats, prepare_writes, storages_of
from .statewalk import storage_key, walk

__all__ = ["CaptureInfo", "StepContext", "Evidence", "randomise_static", "static_dict", "ReadOrigin"]


def static_dict(target: Target) -> dict[str, torch.Tensor]:
    """``target.static()`` as a name -> tensor dict (lists get ``static[i]`` names)."""
    s = target.static()
    if s is None:
        return {}
    if isinstance(s, dict):
        items = dict(s)
    elif isinstance(s, (list, tuple)):
        items = {f"static[{i}]": t for i, t in enumerate(s)}
    else:
        raise contract_error(
            f"{type(target).__name__}.static() must return a dict of name -> tensor or a list of tensors, "
            f"got {type(s).__name__}"
        )
    for k, t in items.items():
        if not isinstance(t, torch.Tensor):
            raise contract_error(
                f"{type(target).__name__}.static()[{k!r}] is a {type(t).__name__}, not a tensor; "
                "return only tensors the target holds (weights, caches, state)"
            )
    _require_held(target, items, isinstance(s, dict))
    return items


# target -> storage keys of its static() tensors already found on it (walked again only when they change)
_HELD: "weakref.WeakKeyDictionary[Any, frozenset[int]]" = weakref.WeakKeyDictionary()


def _require_held(target: Target, items: dict[str, torch.Tensor], named: bool) -> None:
    """A contract TypeError when a static() tensor's storage is not reachable from the target's attributes.

    graphsafe restores, randomises and compares static tensors through their
    storage; a tensor built fresh by static() (or held elsewhere) is a
    different buffer on every call, so those steps would touch nothing the
    graph reads, and its freed address could hide another buffer.
    """
    keys = {k: storage_key(t) for k, t in items.items() if t.untyped_storage().nbytes() > 0}
    if not keys:
        return
    try:
        if set(keys.values()) <= _HELD.get(target, frozenset()):
            return
    except TypeError:  # not weak-referenceable: check every time
        pass
    held = {storage_key(t) for _, t in walk(target)}
    for k, key in keys.items():
        if key not in held:
            label = f"static()[{k!r}]" if named else f"static()[{k.removeprefix('static[').removesuffix(']')}]"
            raise contract_error(
                f"{type(target).__name__}.{label} is not held by the target; return tensors stored on the "
                "target (assign them to attributes in setup())"
            )
    try:
        _HELD[target] = frozenset(keys.values())
    except TypeError:
        pass


def randomise_static(target: Target, seed: int) -> None:
    """Re-fill floating static tensors with values fixed by ``seed`` (same on every device)."""
    from ..values import derive_seed, seeded

    for name, t in static_dict(target).items():
        if t.dtype.is_floating_point:
            with torch.no_grad():
                t.copy_(seeded(tuple(t.shape), seed=derive_seed(seed, name), dtype=t.dtype, device=t.device))


@dataclass
class CaptureInfo:
    """What happened around one capture: the batch, and who wrote which buffer."""

    size: int
    batch: Batch
    prepare_written: set[int]  # storages the capture-time prepare created or changed
    warmup_written: set[int]  # storages that changed during warm-up
    graph_written: set[int]  # storages some captured launch writes
    paths: dict[int, list[str]]  # storage -> attribute paths at capture
    launches: list[Launch]
    warmup_launches: list[Launch] = field(default_factory=list)
    warmup_kernel_writes: set = field(default_factory=set)  # (kernel, argument) pairs written in warm-up


@dataclass
class StepContext:
    target_cls: type
    target_name: str
    spec: CaptureSpec
    engine: Any
    session: Any
    graph: Graph
    info: CaptureInfo
    history: list[Batch]  # unpadded steps up to and including this one
    padded: list[Batch]
    seed: int
    graph_live: list[torch.Tensor] = field(default_factory=list)
    eager_live: list[torch.Tensor] = field(default_factory=list)
    graph_static: dict[str, torch.Tensor] = field(default_factory=dict)
    eager_static: dict[str, torch.Tensor] = field(default_factory=dict)
    mismatches: list[Mismatch] = field(default_factory=list)
    compare_fn: Any = None  # (live_a, live_b, static_a, static_b, batch) -> list[Mismatch]

    @property
    def k(self) -> int:
        return len(self.history) - 1

    @property
    def batch(self) -> Batch:
        return self.history[-1]

    @functools.cached_property
    def evidence(self) -> "Evidence":
        return Evidence(self)


@dataclass
class ReadOrigin:
    key: int
    path: str
    origin: str  # "warmup-only", "earlier-prepare", "never-written"
    floating: bool


@dataclass
class ScratchRun:
    live: list[torch.Tensor]
    static: dict[str, torch.Tensor]
    launches: list[Launch]
    buffers_after_prepare: dict[str, torch.Tensor]


class Evidence:
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
        """Buffers the graph reads that neither this step's prepare nor the graph writes."""
        info, ctx = self.ctx.info, self.ctx
        out = []
        for key, buf in ctx.graph.recording.external.items():
            if key in ctx.session.static_keys or key in info.graph_written or not buf.alive():
                continue
            if key in self.prepare_written:
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

    def rebound(self, keys: list[int]) -> list[str]:
        """Where this step's metadata went: capture-time paths of ``keys`` that now hold another tensor."""
        from .statewalk import paths_by_storage

        now = {p: k for k, ps in paths_by_storage(self.ctx.session.target).items() for p in ps}
        out = []
        for key in keys:
            for p in self.ctx.info.paths.get(key, []):
                if p in now and now[p] != key:
                    out.append(f"{p} (now a new tensor at {hex(now[p])})")
        return out

    # -- the same padded steps, eagerly, without graphs -------------------------------
    def _scratch(self, history: bool) -> ScratchRun:
        ctx = self.ctx
        inst = ctx.target_cls()
        inst.setup(ctx.spec, ctx.engine.device)
        randomise_static(inst, ctx.seed)
        static_keys = {t.untyped_storage().data_ptr() for t in static_dict(inst).values()}
        steps = ctx.padded if history else ctx.padded[-1:]
        if history:
            # the graph instance's own history: every capture (largest first) before the example
            for size in sorted(ctx.session.infos, reverse=True):
                inst.prepare(ctx.session.infos[size].batch)
                inst.forward()
        launches: list[Launch] = []
        bufs: dict[str, torch.Tensor] = {}
        out = None
        for i, pb in enumerate(steps):
            poison_floats(storages_of(inst, exclude=static_keys).values())
            inst.prepare(pb)
            if i == len(steps) - 1:
                bufs = {p: t.clone() for p, t in walk(inst) if t.untyped_storage().data_ptr() not in static_keys}
                with Recorder("observe") as rec:
                    out = inst.forward()
                launches = rec.launches
            else:
                out = inst.forward()
        outs = as_outputs(out)
        live = [t.clone() for t in inst.live(outs, steps[-1])]
        static = {k: v.clone() for k, v in static_dict(inst).items()}
        ctx.engine.synchronize()
        return ScratchRun(live, static, launches, bufs)

    @functools.cached_property
    def scratch(self) -> ScratchRun:
        """Eager run of this example's padded steps (with the same poisoning), no graph."""
        return self._scratch(history=True)

    @functools.cached_property
    def fresh_scratch(self) -> ScratchRun:
        """Eager run of only this step, padded, on a fresh instance (no history)."""
        return self._scratch(history=False)

    def scratch_mismatches(self, run: ScratchRun) -> list[Mismatch]:
        ctx = self.ctx
        return ctx.compare_fn(run.live, ctx.eager_live, run.static, ctx.eager_static, ctx.batch)

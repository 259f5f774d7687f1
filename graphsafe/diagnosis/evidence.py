"""Evidence several diagnosis probes share, computed once per failing step and only on demand.

Who wrote every buffer the graph reads (the write ledger around capture, and this step's
``prepare`` re-run over filled copies, the calls of each parity apart), down to the region of
an allocation each launch of the graph reads; where this step's values went when the graph
read something else; which buffers carry a replay's result into the next; and eager re-runs of
the example's padded steps without graphs (with the instance's own history, and of the step alone).
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from ..capture.context import live_rows
from ..capture.ledger import PrepareLedger, poison_floats, prepare_calls, prepare_writes, storages_of
from ..capture.regions import byte_region, region_name, tensor_args, written_args
from ..capture.session import call_target
from ..capture.statewalk import byte_view, paths_by_storage, storage_key, walk
from ..capture.statics import randomise_static, static_dict, static_keys
from ..contract import capture_prepare
from ..engines import as_outputs
from ..engines.recording import Launch, Override, Recorder, TensorArg
from ..findings import Mismatch
from .context import StepContext

__all__ = ["Evidence", "ReadOrigin", "ScratchRun"]

_INDEX = re.compile(r"\[[^\[\]]*\]")


@dataclass
class ReadOrigin:
    """A buffer the graph reads that did not hold this batch's values, and who wrote it last."""

    key: int
    path: str  # the storage's paths, or the view the graph reads (``self.tok_meta[0, 1]``)
    origin: str  # "warmup-only", "earlier-prepare", "never-written"
    floating: bool
    alternate: bool = False  # this prepare writes it on alternate calls only (a double buffer)
    stale: bool = False  # prepare writes it, but it did not hold what prepare writes for this batch
    region: tuple[int, int] | None = None  # the bytes of the storage the graph read


@dataclass
class ScratchRun:
    """An eager run without graphs: its live outputs, where it differs from the eager reference of the
    step (outputs and static state), its launches and its buffers after prepare.  The instance itself
    is dropped once compared: diagnosis holds at most one extra copy of the target's state at a time."""

    live: list[torch.Tensor]
    mismatches: list[Mismatch]
    launches: list[Launch]
    buffers_after_prepare: dict[str, torch.Tensor]
    paths: dict[int, list[str]] | None = None  # storage -> attribute paths in the run's instance
    static: dict[str, torch.Tensor] | None = None  # the run's static state, when asked to keep it
    overridden: int = 0  # host values the last forward ran with overridden (see scratch_overridden)
    #: storage key -> its bytes after the last prepare(), and after the last forward() (the repair experiment's
    #: read-level values: what the run's launches read)
    bytes_after_prepare: dict[int, torch.Tensor] = field(default_factory=dict)
    bytes_after_forward: dict[int, torch.Tensor] = field(default_factory=dict)


def _fresh_instance(ctx: StepContext) -> tuple[Any, set[int]]:
    """A new instance of the target, set up as the graph instance was (its constants shared): the instance
    and the storage keys of its static state and constants."""
    inst = ctx.target_cls()
    call_target("setup(spec, device) [diagnosis]", inst.setup, ctx.spec, ctx.engine.device)
    return inst, static_keys(inst) | ctx.session.share_constants(inst)


def warmup_wrote_last(infos: list, key: int, lo: int, hi: int) -> bool:
    """In capture order (each capture's ``prepare``, then its warm-up), was a warm-up the last to write bytes
    ``[lo, hi)`` of the storage at ``key``: by a recorded launch's arguments, or as a storage the warm-up changed?

    A key is an address.  A capture's ``prepare`` that wrote (or made) the storage at ``key`` ends what earlier
    warm-ups did there: their writes went to that storage's earlier bytes, or to another storage since freed at
    the same address (a warm-up's temporary, whose address a later ``prepare``'s fresh metadata took)."""
    last = False
    for info in infos:
        if key in info.prepare_written:
            last = False
        if key in info.warmup_written or any(
            r is not None and r[0] < hi and lo < r[1]
            for launch in info.warmup_launches
            for v in written_args(launch, info.warmup_kernel_writes)
            if v.key == key
            for r in (byte_region(v),)
        ):
            last = True
    return last


class Evidence:
    """Facts about one failing step (see the module docstring); each computed on first use.

    Made before anything runs the target again: it keeps the bytes of the buffers the graph reads as
    the replay read them (``as_replayed``).  ``looked`` collects what probes that explained nothing saw,
    for the message of a ``replay-mismatch``; ``claimed``, the bytes a probe's claim names (``inert`` tests them).
    """

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self.tensors = storages_of(ctx.session.target, exclude=ctx.session.static_keys)
        # what prepare may have written for the graph: its inputs, and whatever else it writes (the graph's
        # own workspaces, accumulators and outputs aside: neither the ledger nor the snapshot holds them)
        self.inputs = {k: t for k, t in self.tensors.items() if k not in ctx.info.graph_written}
        ext = ctx.graph.recording.external
        self.as_replayed = {k: byte_view(t).clone() for k, t in self.inputs.items() if k in ext}
        self.looked: list[str] = []
        self.memo: dict[str, Any] = {}  # experiments run once per failing step (the re-capture)
        self.claimed: dict[str, list[tuple[int, int, int]]] = {}  # probe -> (storage key, first byte, end byte)

    def note(self, probe: str, saw: str) -> None:
        """Record what ``probe`` looked at and saw when it explained nothing."""
        self.looked.append(f"{probe}: {saw}")

    def claim(self, probe: str, key: int, region: tuple[int, int] | None) -> None:
        """Record the bytes ``region`` of storage ``key`` that ``probe``'s finding says the graph read wrong."""
        self.claimed.setdefault(probe, []).extend([(key, *region)] if region else [])  # none: the whole storage

    # -- who wrote what the graph reads --------------------------------------------
    @functools.cached_property
    def graph_read_tensors(self) -> dict[int, torch.Tensor]:
        """Buffers the graph reads, not static, still reachable from the target."""
        ext = self.ctx.graph.recording.external
        return {k: t for k, t in self.tensors.items() if k in ext}

    @functools.cached_property
    def ledger(self) -> PrepareLedger:
        """What this step's prepare writes, per parity of call, over every buffer of the target but its statics
        and the ones the graph writes."""
        g, padded = self.ctx.session.target, self.ctx.padded[-1]
        return prepare_calls(self.inputs, lambda: call_target("prepare(batch) [diagnosis]", g.prepare, padded))

    def wrote_for_batch(self, key: int, lo: int = 0, hi: int | None = None) -> bool:
        """Did this step's prepare write bytes ``[lo, hi)`` of ``key`` for this batch?  A prepare that writes
        them alike on every call did.  One that writes them on alternate calls, or differently from call to
        call, did only if they held, when the graph replayed, what it writes there."""
        led = self.ledger
        s, o = led.step.region(key, lo, hi), led.other.region(key, lo, hi)
        if s is None and o is None:
            return False
        if (
            s is not None
            and o is not None
            and torch.equal(s, o)
            and torch.equal(led.step.value[key][lo:hi][s], led.other.value[key][lo:hi][o])
        ):
            return True
        return led.holds(key, self.as_replayed[key], lo, hi)

    def eager_reads_the_same(self, key: int, lo: int, hi: int) -> bool:
        """Did the replay read in bytes ``[lo, hi)`` of ``key`` exactly what an eager run of this step (a fresh
        instance, padded alike) reads at the same argument of the same launch?  Then that region cannot be
        the cause, whoever last wrote it: a wrapper's constant (a ``qo_indptr`` made once when the wrapper was
        built in an earlier ``prepare``) holds what every batch needs."""
        replayed = self.as_replayed.get(key)  # (None: no longer reachable from the target)
        if replayed is None:
            return False
        graph = [launch for launch in self.ctx.info.launches if launch.device_work]
        run = self.fresh_scratch
        eager = [launch for launch in run.launches if launch.device_work]
        if [(la.kind, la.name) for la in graph] != [(lb.kind, lb.name) for lb in eager]:
            return False
        for la, lb in zip(graph, eager):
            for name, v in la.args.items():
                w = lb.args.get(name)
                if not (
                    isinstance(v, TensorArg)
                    and v.key == key
                    and byte_region(v) == (lo, hi)
                    and isinstance(w, TensorArg)
                    and w.shape == v.shape
                    and w.dtype == v.dtype
                ):
                    continue
                for path in (run.paths or {}).get(w.key, []):
                    t = run.buffers_after_prepare.get(path)
                    if t is not None and t.shape == w.shape and t.dtype.itemsize * t.numel() == hi - lo:
                        return torch.equal(byte_view(t.contiguous()), replayed[lo:hi])
        return False

    def read_regions(self, key: int) -> list[tuple[int, int, TensorArg | None]]:
        """The regions of ``key`` the graph's launches read, in launch order (the whole storage if none is known).
        Views and bookkeeping ops read nothing: only launches that do device work count."""
        out: list[tuple[int, int, TensorArg | None]] = []
        for launch in self.ctx.info.launches:
            for v in tensor_args(launch) if launch.device_work else ():
                r = byte_region(v) if v.key == key else None
                if r is not None and all((lo, hi) != r for lo, hi, _ in out):
                    out.append((*r, v))
        return out or [(0, self.ctx.graph.recording.external[key].nbytes, None)]

    @functools.cached_property
    def _walked(self) -> tuple[dict[tuple, str], dict[str, torch.Tensor]]:
        """(storage, offset, shape) -> the first attribute path holding that view now; and path -> tensor."""
        views: dict[tuple, str] = {}
        at: dict[str, torch.Tensor] = {}
        for path, t in walk(self.ctx.session.target):
            views.setdefault((storage_key(t), t.storage_offset(), tuple(t.shape)), path)
            at[path] = t
        return views, at

    def name(
        self, key: int, lo: int | None = None, hi: int | None = None, arg: TensorArg | None = None, exact: bool = False
    ) -> str:
        """A buffer's name: the view ``arg`` if a path holds exactly it, else its paths at capture, narrowed to
        ``[lo, hi)`` when that is only part of the storage (its leading rows too when ``exact``: one copy of
        a packed double buffer)."""
        views, at = self._walked
        if arg is not None and (key, arg.offset, arg.shape) in views:
            return views[(key, arg.offset, arg.shape)]
        paths = self.ctx.info.paths.get(key, [])
        if not paths:
            return f"<unreachable buffer at {hex(key)}>"
        whole = sorted(
            (p for p in paths if p in at and storage_key(at[p]) == key), key=lambda p: -at[p].numel()
        )  # the path that spans the most of the storage
        if lo is None or hi is None or not whole or (not exact and _leading_rows(at[whole[0]], lo, hi)):
            return ", ".join(paths)  # the whole buffer, or its first rows (a graph of a smaller size reads those)
        return region_name(whole[0], at[whole[0]], lo, hi)

    @functools.cached_property
    def unwritten_reads(self) -> list[ReadOrigin]:
        """Regions the graph reads that did not hold this batch's values: neither this step's prepare nor the
        graph writes them (the graph's writes learned at capture, then proved by replaying over the
        candidates: a kernel whose writes were not learned still writes them)."""
        ctx, info = self.ctx, self.ctx.info
        infos = list(ctx.session.infos.values())
        found: dict[int, list[tuple[int, int, TensorArg | None]]] = {}
        for key, buf in ctx.graph.recording.external.items():
            if key in ctx.session.unpoisoned or key in info.graph_written or not buf.alive() or buf.graph_only:
                continue  # (static or constant; alive but unreachable: nothing this step writes it; graph_only: an address is no read)
            stale = [
                (lo, hi, a)
                for lo, hi, a in self.read_regions(key)
                if not self.wrote_for_batch(key, lo, hi) and not self.eager_reads_the_same(key, lo, hi)
            ]
            if stale:
                found[key] = stale
        replay_written = self._replay_writes(set(found))
        out = []
        for key, regions in found.items():
            if key in replay_written:
                continue
            buf = ctx.graph.recording.external[key]
            lo, hi, arg = regions[0]
            if warmup_wrote_last(infos, key, lo, hi):
                origin = "warmup-only"
            elif any(key in i.prepare_written for i in infos):
                origin = "earlier-prepare"
            else:
                origin = "never-written"
            led = self.ledger
            packed = led.step.region(key) is not None and led.other.region(key) is not None  # both copies in it
            names = list(
                dict.fromkeys(
                    self.name(key, a, b, v, exact=packed and led.alternating(key, a, b)) for a, b, v in regions
                )
            )
            out.append(
                ReadOrigin(
                    key,
                    ", ".join(names),
                    origin,
                    "float" in buf.dtype,
                    alternate=led.alternating(key, lo, hi),
                    stale=led.written(key, lo, hi),
                    region=(lo, hi),
                )
            )
        return out

    def _replay_writes(self, keys: set[int]) -> set[int]:
        """Which of ``keys`` a replay of the graph writes, whatever it writes: replayed over two fills."""
        tensors = {k: t for k, t in self.graph_read_tensors.items() if k in keys}
        if not tensors or self.ctx.unreplayable:  # (unreplayable: a replay would fault or never end)
            return set()
        graph = self.ctx.graph
        return prepare_writes(tensors, lambda: (graph.replay(), self.ctx.engine.synchronize()))  # type: ignore[func-returns-value]  # the tuple only runs both

    def rebound(self, keys: list[int]) -> list[str]:
        """Where this step's metadata went: capture-time paths of ``keys`` that now hold another tensor."""
        now = {p: k for k, ps in paths_by_storage(self.ctx.session.target).items() for p in ps}
        out = []
        for key in keys:
            for p in self.ctx.info.paths.get(key, []):
                if p in now and now[p] != key:
                    out.append(f"{p} (now a new tensor at {hex(now[p])})")
        return out

    def moved_to(self, read: ReadOrigin) -> list[str]:
        """Where this step's prepare wrote the values the graph should have read in ``read``: for a region
        written on alternate calls, the region of the same allocation that this step's call fills with what
        the other calls put in ``read`` (the other copy of a packed double buffer); a buffer at the same path
        but for a container index (``self.meta[1]`` for ``self.meta[0]``); or the buffer an eager run of this
        batch reads at the same kernel argument.  Each written by this step's prepare."""
        key, (lo, hi) = read.key, read.region or (0, 0)
        step, other = self.ledger.step, self.ledger.other
        out: list[str] = []
        size = self.ctx.graph.recording.external[key].nbytes
        want = other.region(key, lo, hi)  # what the other calls write into the region: this batch's values

        def copy_at(o: int, want: torch.Tensor) -> bool:  # does this step's call write those values at offset o?
            got = step.region(key, o, o + hi - lo)
            return (
                got is not None
                and torch.equal(got, want)
                and torch.equal(step.value[key][o : o + hi - lo][got], other.value[key][lo:hi][want])
            )

        width = hi - lo
        if read.alternate and want is not None:
            out += [
                self.name(key, o, o + width, exact=True)
                for o in range(lo % width, size - width + 1, width)
                if o != lo and copy_at(o, want)
            ][:1]
        shape = {_INDEX.sub("[]", p) for p in self.ctx.info.paths.get(key, [])}
        for k, paths in paths_by_storage(self.ctx.session.target).items():
            if k != key and k in step.mask and any(_INDEX.sub("[]", p) in shape for p in paths):
                out.append(", ".join(paths))
        return out or self.eager_reads_instead(key)  # (an eager re-run of the example: only when needed)

    def eager_reads_instead(self, key: int) -> list[str]:
        """Paths an eager run of this batch reads, at the kernel arguments where the graph reads ``key``,
        that are not ``key``'s and that this step's prepare wrote (in the graph's instance)."""
        ctx = self.ctx
        mine = set(ctx.info.paths.get(key, []))
        now = {p: k for k, ps in paths_by_storage(ctx.session.target).items() for p in ps}
        run = self.scratch
        cap = [launch for launch in ctx.info.launches if launch.device_work]
        eager = [launch for launch in run.launches if launch.device_work]
        sm = difflib.SequenceMatcher(
            a=[(x.kind, x.name) for x in cap], b=[(x.kind, x.name) for x in eager], autojunk=False
        )
        out: list[str] = []
        for i, j, n in sm.get_matching_blocks():
            for a, b in zip(cap[i : i + n], eager[j : j + n]):
                for arg, v in a.args.items():
                    w = b.args.get(arg)
                    if not (isinstance(v, TensorArg) and isinstance(w, TensorArg) and v.key == key):
                        continue
                    for p in (run.paths or {}).get(w.key, []):
                        if p not in mine and now.get(p) in self.ledger.step.mask and p not in out:
                            out.append(p)
        return out

    # -- the same padded steps, eagerly, without graphs -------------------------------
    def _scratch(
        self, history: bool, padded: bool = True, overrides: tuple[Override, ...] = (), keep_static: bool = False
    ) -> ScratchRun:
        ctx = self.ctx
        inst, statics = _fresh_instance(ctx)
        steps = ctx.padded if padded else ctx.history
        # without the graph instance's history, the earlier steps run as the eager reference ran them
        # (unpadded): state they leave by design (a KV cache) is then the reference's, and only this step differs
        steps = steps if history else [*ctx.history[:-1], steps[-1]]
        if history:
            # the graph instance's own history: every capture (largest first) before the example
            for size in sorted(ctx.session.infos, reverse=True):
                call_target("prepare(batch) [diagnosis]", capture_prepare(inst), ctx.session.infos[size].batch)
                call_target("forward() [diagnosis]", inst.forward)
        randomise_static(inst, ctx.seed)  # as the graph instance's reset: after the captures, at the example's start
        launches: list[Launch] = []
        before: dict[int, torch.Tensor] = {}
        after: dict[int, torch.Tensor] = {}
        bufs: dict[str, torch.Tensor] = {}
        paths: dict[int, list[str]] = {}
        out: Any = None  # what the last step's forward() returned
        for i, pb in enumerate(steps):
            poison_floats(storages_of(inst, exclude=statics).values())
            call_target("prepare(batch) [diagnosis]", inst.prepare, pb)
            if i == len(steps) - 1:
                bufs = {p: t.clone() for p, t in walk(inst) if storage_key(t) not in statics}
                paths = paths_by_storage(inst)
                before = {k: byte_view(t).clone() for k, t in storages_of(inst, exclude=statics).items()}
                with Recorder("observe", overrides=overrides) as rec:
                    out = call_target("forward() [diagnosis]", inst.forward)
                launches = rec.launches
                after = {k: byte_view(t).clone() for k, t in storages_of(inst, exclude=statics).items() if k in before}
            else:
                out = call_target("forward() [diagnosis]", inst.forward)
        as_outputs(out)  # checked: a tensor or a tuple of tensors
        live = [t.clone() for t in live_rows(inst, out, steps[-1])]
        mism = ctx.comparator.step(live, ctx.eager_live, static_dict(inst), ctx.eager_static, ctx.batch)
        ctx.engine.synchronize()
        return ScratchRun(
            live, mism, launches, bufs, paths, static_dict(inst) if keep_static else None, rec.overridden, before, after
        )

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
        """Eager run of this step, padded, on a fresh instance without the graph instance's history (its
        earlier steps as the eager reference ran them)."""
        return self.fresh_run(padded=True)

    @functools.cached_property
    def capture_batch_launches(self) -> list[Launch]:
        """What an eager forward() launches for the capture batch itself, on a fresh instance run the way the
        capture ran (prepare, warm-up, pre-screen, then the recorded call): the control for a launch diff."""
        ctx = self.ctx
        inst, _ = _fresh_instance(ctx)
        randomise_static(inst, ctx.seed)
        call_target("prepare(batch) [diagnosis]", capture_prepare(inst), ctx.info.batch)
        for _ in range(2):
            call_target("forward() [diagnosis]", inst.forward)
        with Recorder("observe") as rec:
            call_target("forward() [diagnosis]", inst.forward)
        ctx.engine.synchronize()
        return rec.launches

    @functools.cached_property
    def fresh_unpadded_scratch(self) -> ScratchRun:
        """:attr:`fresh_scratch` with this step unpadded too (poisoned like the others): the eager reference
        again, through the diagnosis' poisoning."""
        return self.fresh_run(padded=False)

    def fresh_run(self, padded: bool) -> ScratchRun:
        """Another eager run of this step on a fresh instance without history (:attr:`fresh_scratch`, or unpadded
        :attr:`fresh_unpadded_scratch`), not kept: a race shows as runs that differ."""
        return self._scratch(history=False, padded=padded)

    def scratch_mismatches(self, run: ScratchRun) -> list[Mismatch]:
        """Where an eager re-run differs from the eager reference of this step."""
        return run.mismatches


def _leading_rows(t: torch.Tensor, lo: int, hi: int) -> bool:
    """Are the bytes ``[lo, hi)`` whole leading rows (dim 0) of ``t``, from its first?"""
    es, start = t.element_size(), t.storage_offset() * t.element_size()
    row = es * (t[0].numel() if t.dim() and t.shape[0] else 1)
    return t.dim() > 0 and t.is_contiguous() and lo == start and (hi - lo) % row == 0 and hi - start <= t.numel() * es

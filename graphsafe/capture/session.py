"""One graph instance of a target, captured once per size and replayed for every example."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import torch

from ..contract import Batch, CaptureSpec, Support, Target, capture_prepare
from ..engines import Engine, Graph
from ..engines.recording import TensorArg
from ..engines.userframe import user_frame_of
from ..errors import CaptureError, GraphsafeError, TargetRaised
from .context import CaptureContext, CaptureInfo, LearnedWrites
from .graph_map import attach, map_graph, sizes_of
from .ledger import Snapshot, poison_floats, prepare_writes, storages_of
from .policies import POLICIES, CapturePolicy
from .statewalk import paths_by_storage, storage_key, walk
from .statics import randomise_static, static_keys

__all__ = ["CaptureSession", "call_target", "raised", "out_of_memory", "as_target_failure"]


def out_of_memory(exc: BaseException) -> bool:
    """Is ``exc`` a failed allocation (``torch.OutOfMemoryError`` on CUDA, ``MemoryError``)?  torch's CPU
    allocator raises a plain ``RuntimeError``: such a failure is a target error all the same, only
    without the flag, because graphsafe does not tell errors apart by their text."""
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError))


def as_target_failure(exc: BaseException, what: str) -> TargetRaised | None:
    """``exc`` as a :class:`TargetRaised`: itself when it is one, a failed allocation while graphsafe ran
    ``what`` on the target's state (a second instance, a comparison) as if the target had raised it;
    None for anything else."""
    if isinstance(exc, TargetRaised):
        return exc
    return raised(what, exc) if out_of_memory(exc) else None


def raised(method: str, exc: BaseException) -> TargetRaised:
    """The target's own exception ``exc``, raised in ``method``, as a picklable :class:`TargetRaised`."""
    text = str(exc).strip()
    return TargetRaised(
        f"{method} raised {type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": "),
        where=user_frame_of(exc) or method,
        method=method,
        exc_type=type(exc).__name__,
        traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        out_of_memory=out_of_memory(exc),
    )


def call_target(method: str, fn: Callable, *args: Any) -> Any:
    """``fn(*args)``, a method of the target; its exceptions become :class:`TargetRaised`.

    graphsafe's own errors (a contract check inside) and interrupts pass through unchanged.
    """
    try:
        return fn(*args)
    except (KeyboardInterrupt, SystemExit, GraphsafeError):
        raise
    except Exception as e:
        raise raised(method, e) from e


class CaptureSession:
    """A target instance with one graph per capture size, sharing one memory pool.

    Sizes are captured in the ``policy``'s order (largest first unless it says ascending), each with
    the policy's batch (or ``capture_batch``, a drawn one) after ``prepare(capture batch)``, one eager
    warm-up and a pre-screen run.  A capture that fails leaves
    ``capture_error`` (a :class:`CaptureContext`) and stops there; an exception
    of the target's own code outside capture raises :class:`TargetRaised`.
    ``reset(seed)`` brings the graph instance back to its post-capture buffers
    and re-randomises static tensors, so every example starts from the same state.
    """

    def __init__(
        self,
        target_cls: type,
        spec: CaptureSpec,
        engine: Engine,
        sizes: tuple[int, ...],
        policy: CapturePolicy = POLICIES["worst"],
        capture_batch: Batch | None = None,
        known_writes: LearnedWrites | None = None,
        support: Support | None = None,
    ):
        self.target_cls, self.spec, self.engine, self.policy = target_cls, spec, engine, policy
        self.sizes = tuple(sorted(set(sizes)))
        self.graphs: dict[int, Graph] = {}
        self.infos: dict[int, CaptureInfo] = {}
        self.notes: list[str] = []
        self.capture_error: CaptureContext | None = None
        self._poisoned = False  # reset() has poisoned: the example's first poison() has nothing to do
        self.constant_paths: dict[str, torch.Tensor] = {}  # attribute path -> a constant buffer
        # what warm-ups learned of kernel writes; learning clones every argument of every warm-up launch, so
        # sessions after the first reuse what the first one learned.  Within a session every size uses what
        # any size's warm-up learned: a warm-up that rewrites identical bytes (the same capture inputs at a
        # smaller size) shows no write of its own
        self._learned = known_writes.copy() if known_writes is not None else LearnedWrites()
        self.target = target_cls()
        with torch.no_grad():
            with engine.host_memory():
                call_target("setup(spec, device)", self.target.setup, spec, engine.device)
            self.static_keys = static_keys(self.target)
            self.pool = engine.new_pool()
            support = support if support is not None else Support(getattr(target_cls, "support", Target.support))
            for size in sorted(self.sizes, reverse=not policy.ascending):
                batch = (
                    capture_batch.padded(size) if capture_batch is not None else policy.batch_for(spec, support, size)
                )
                try:
                    self._capture(size, batch)
                except TargetRaised:
                    raise
                except (CaptureError, RuntimeError, AssertionError, ValueError, IndexError, KeyError, MemoryError) as e:
                    if out_of_memory(e):  # the target's state and graphsafe's copies do not fit: a target
                        raise raised(f"capture at size {size}", e) from e  # error, as in setup()
                    self.capture_error = CaptureContext(self, size, batch, e)
                    if not engine.healthy():
                        self.notes.append(
                            "the failed capture left the CUDA context unusable; later targets need a new process"
                        )
                    break
            self.constant_keys = self._constants(batch) if self.graphs else set()
            #: storages the per-step NaN poison leaves alone: static state and constants
            self.unpoisoned = self.static_keys | self.constant_keys
            # bytes only: holding the tensors would keep freed buffers alive and hide stale pointers
            self._post: Snapshot | None = Snapshot(self._graph_buffers(), hold=False)

    # -- capture -------------------------------------------------------------------
    def _capture(self, size: int, batch: Batch) -> None:
        g, eng = self.target, self.engine
        before = Snapshot(storages_of(g, self.static_keys))
        with eng.host_memory():
            call_target("prepare(batch)", capture_prepare(g), batch)
        now = storages_of(g, self.static_keys)
        prepare_written = before.changed() | (set(now) - set(before.tensors))
        pre_warm = Snapshot(now)
        wrec = call_target(
            "forward() (warm-up)",
            lambda: eng.warmup(g.forward, skip_keys=self.static_keys, known=self._learned.kernels),
        )
        self._learned.pairs |= wrec.kernel_writes
        self._learned.kernels |= wrec.learned_kernels
        wrec.kernel_writes |= self._learned.pairs
        # forward() ran eagerly just now: what fails here is the pre-screen's host-sync check
        # (the engine raises CaptureError), or the target failing a second call
        call_target("forward() (pre-screen)", eng.prescreen, g.forward)
        after = storages_of(g, self.static_keys)
        warmup_written = pre_warm.changed() | (set(after) - set(pre_warm.tensors))
        graph = eng.capture(g.forward, pool=self.pool)
        graph.size = size
        rec = graph.recording
        graph_written = set(rec.written)
        for launch in rec.launches:  # kernels graphsafe sees only as calls: their writes learned in warm-up
            if launch.kind == "aten":
                continue
            for name, v in launch.args.items():
                if (launch.name, name) in wrec.kernel_writes:
                    graph_written.update(
                        t.key for t in (v if isinstance(v, tuple) else (v,)) if isinstance(t, TensorArg)
                    )
        paths = paths_by_storage(g)
        gmap = None
        if graph.read is not None:  # the graph reader: every storage the graph's nodes point into, mapped once
            held = storages_of(g, set())
            gmap = map_graph(graph.read, sizes_of(held), paths, graph.space)
            attach(gmap, rec, held)
            graph_written |= gmap.written
            graph.host_reads = gmap.host_reads()
            graph.space = None  # (its answers were for this capture)
            rec.notes.extend(graph.read.notes)
        self.notes.extend(n for n in rec.notes if n not in self.notes)
        self.graphs[size] = graph
        self.infos[size] = CaptureInfo(
            size=size,
            batch=batch,
            prepare_written=prepare_written,
            warmup_written=warmup_written,
            graph_written=graph_written,
            paths=paths,
            graph_map=gmap,
            launches=list(rec.launches),
            warmup_launches=list(wrec.launches),
            warmup_kernel_writes=set(wrec.kernel_writes),
        )

    def _constants(self, batch: Batch) -> set[int]:
        """Floating buffers the graphs read that neither prepare(), warm-up nor a graph ever writes.

        They hold what setup() put there (a softmax scale, a table of constants): graphsafe does not
        NaN-fill them before each step, and the check's notes name them.
        """
        written: set[int] = set()
        for info in self.infos.values():
            written |= info.prepare_written | info.warmup_written | info.graph_written
        read = {k for graph in self.graphs.values() for k, b in graph.recording.external.items() if b.alive()}
        candidates = {
            k: t
            for k, t in storages_of(self.target, self.static_keys).items()
            if k in read and k not in written and t.dtype.is_floating_point
        }
        if candidates:  # a prepare() that rewrites an equal value looks unwritten by content: ask it twice
            candidates = {
                k: t
                for k, t in candidates.items()
                if k
                not in prepare_writes(
                    candidates, lambda: call_target("prepare(batch)", capture_prepare(self.target), batch)
                )
            }
        paths = paths_by_storage(self.target)
        self.constant_paths = {paths[k][0]: t for k, t in candidates.items() if paths.get(k)}
        if candidates:
            self.notes.append(
                "treated as constants (written by setup() only, never by prepare() or forward()): "
                + ", ".join(sorted(self.constant_paths))
            )
        return set(candidates)

    def share_constants(self, other: Any) -> set[int]:
        """Give ``other`` (a fresh instance of the target) this instance's constants, so that a setup()
        that is not deterministic (random weights, say) leaves both alike; return their storage keys
        in ``other``."""
        if not self.constant_paths:
            return set()
        keys = set()
        for path, t in walk(other):
            src = self.constant_paths.get(path)
            if src is not None and src.shape == t.shape and src.dtype == t.dtype:
                t.copy_(src)
                keys.add(storage_key(t))
        return keys

    def _graph_buffers(self) -> dict[int, torch.Tensor]:
        ext: set[int] = set()
        for graph in self.graphs.values():
            ext |= {k for k, b in graph.recording.external.items() if b.alive()}
        return {k: t for k, t in storages_of(self.target, self.static_keys).items() if k in ext}

    # -- per example -----------------------------------------------------------------
    def learned_writes(self) -> LearnedWrites:
        """What this session's warm-ups (and the sessions it was given) learned of kernel writes."""
        return self._learned.copy()

    def size_for(self, num_reqs: int) -> int:
        """The smallest captured size that holds ``num_reqs`` requests."""
        for s in self.sizes:
            if s >= num_reqs and s in self.graphs:
                return s
        raise LookupError(f"no captured size holds {num_reqs} requests (captured: {sorted(self.graphs)})")

    def reset(self, seed: int) -> None:
        """Back to the state before an example's first step: the post-capture buffers, static tensors
        re-randomised from ``seed``, and the buffers :meth:`poison` fills NaN-filled.  Those are not
        restored first (the NaN overwrites every byte), and the example's first :meth:`poison` has nothing
        left to do: no call of the target comes between."""
        held = storages_of(self.target, self.static_keys)
        filled = self._poisonable(held)
        assert self._post is not None, "reset() of a closed session"
        self._post.restore_into({k: t for k, t in held.items() if k not in filled})
        randomise_static(self.target, seed)
        poison_floats(filled.values())
        self._poisoned = True

    def poison(self) -> None:
        """NaN-fill every floating buffer of the graph instance but static tensors and constants."""
        if self._poisoned:  # reset() just did
            self._poisoned = False
            return
        poison_floats(self._poisonable(storages_of(self.target, self.static_keys)).values())

    def _poisonable(self, held: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """The storages among ``held`` that :meth:`poison` fills: floating, neither static nor a constant."""
        return {k: t for k, t in held.items() if k not in self.unpoisoned and t.dtype.is_floating_point}

    def close(self) -> None:
        """Drop the graphs and the target instance now (a drawn capture's, before the next example's is made)."""
        self.graphs.clear()
        self.infos.clear()
        self.constant_paths = {}
        self._post = None
        self.target = None

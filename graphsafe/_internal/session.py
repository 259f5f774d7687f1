"""One graph instance of a target, captured once per size and replayed for every example."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..contract import Batch, CaptureSpec, Support, is_contract_error
from ..engines.base import Engine, Graph
from ..engines.recording import CaptureError, TensorArg
from ..findings import Finding, FindingKind
from ..probes import capture_failure
from .evidence import CaptureInfo, randomise_static, static_dict
from .ledger import Snapshot, storages_of
from .statewalk import paths_by_storage

__all__ = ["CaptureSession", "TargetRaised", "call_target", "CAPTURE_SEED", "capture_query_len"]

CAPTURE_SEED = 2**31 - 1  # reserved: no replayed batch uses the capture's inputs


class TargetRaised(Exception):
    """The target's own code raised (outside capture)."""

    def __init__(self, method: str, exc: BaseException):
        super().__init__(f"{method} raised {type(exc).__name__}: {exc}")
        self.method = method
        self.exc = exc

    def finding(self) -> Finding:
        import traceback

        where = capture_failure.user_location(self.exc)
        return Finding(
            kind=FindingKind.TARGET_ERROR,
            message=f"{self.method} raised {type(self.exc).__name__}: {str(self.exc).strip().splitlines()[0] if str(self.exc).strip() else ''}",
            where=where or self.method,
            error="".join(traceback.format_exception(type(self.exc), self.exc, self.exc.__traceback__)),
        )


def call_target(method: str, fn: Callable, *args) -> Any:
    try:
        return fn(*args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except TypeError as e:
        # a contract error (wrong return type) raised by graphsafe itself propagates as is
        if is_contract_error(e):
            raise
        raise TargetRaised(method, e) from e
    except Exception as e:
        raise TargetRaised(method, e) from e


def capture_query_len(support: Support, spec: CaptureSpec) -> int:
    return 1 if support == Support.UNIFORM_SINGLE_TOKEN_DECODE else spec.max_query_len


class CaptureSession:
    """A target instance with one graph per capture size, sharing one memory pool.

    Sizes are captured largest first, each after ``prepare(capture batch)``,
    one eager warm-up and a pre-screen run.  ``reset(seed)`` brings the graph
    instance back to its post-capture buffers and re-randomises static tensors,
    so every example starts from the same state.
    """

    def __init__(
        self,
        target_cls: type,
        spec: CaptureSpec,
        engine: Engine,
        sizes: tuple[int, ...],
        capture_batch: Batch | None = None,
        known_writes: set | None = None,
    ):
        self.target_cls, self.spec, self.engine = target_cls, spec, engine
        self.sizes = tuple(sorted(set(sizes)))
        self.graphs: dict[int, Graph] = {}
        self.infos: dict[int, CaptureInfo] = {}
        self.notes: list[str] = []
        self.failure: Finding | None = None
        # (kernel, argument) pairs known to be written; learning them clones every argument of every
        # warm-up launch, so sessions after the first reuse what the first one learned
        self.known_writes = known_writes
        self.target = target_cls()
        with torch.no_grad():
            call_target("setup(spec, device)", self.target.setup, spec, engine.device)
            self.static_keys = {t.untyped_storage().data_ptr() for t in static_dict(self.target).values()}
            self.pool = engine.new_pool()
            q = capture_query_len(target_cls.support, spec)
            for size in sorted(self.sizes, reverse=True):
                batch = capture_batch if capture_batch is not None else spec.worst_case_batch(size, query_len=q, seed=CAPTURE_SEED)
                batch = batch.padded(size)
                try:
                    self._capture(size, batch)
                except TargetRaised:
                    raise
                except (CaptureError, RuntimeError, AssertionError, ValueError, IndexError, KeyError) as e:
                    f = capture_failure.finding(e, size=size, phase="capture")
                    f.capture_size, f.capture_batch = size, batch
                    self.failure = f
                    if not engine.healthy():
                        self.notes.append(
                            "the failed capture left the CUDA context unusable; later targets need a new process"
                        )
                    break
            # bytes only: holding the tensors would keep freed buffers alive and hide stale pointers
            self._post = Snapshot(self._graph_buffers(), hold=False)

    # -- capture -------------------------------------------------------------------
    def _capture(self, size: int, batch: Batch) -> None:
        g, eng = self.target, self.engine
        before = Snapshot(storages_of(g, self.static_keys))
        call_target("prepare(batch)", g.prepare, batch)
        now = storages_of(g, self.static_keys)
        prepare_written = before.changed() | (set(now) - set(before.tensors))
        pre_warm = Snapshot(now)
        try:
            wrec = eng.warmup(g.forward, runs=1, skip_keys=self.static_keys, learn=self.known_writes is None)
            if self.known_writes is not None:
                wrec.kernel_writes |= self.known_writes
        except Exception as e:  # the target's eager forward raised
            raise TargetRaised("forward() (warm-up)", e) from e
        try:
            eng.prescreen(g.forward)
        except Exception as e:
            if "synchroniz" in str(e) or isinstance(e, CaptureError):
                raise CaptureError(f"forward() synchronises with the host: {e}", capture_failure.user_location(e)) from e
            raise TargetRaised("forward() (pre-screen)", e) from e
        after = storages_of(g, self.static_keys)
        warmup_written = pre_warm.changed() | (set(after) - set(pre_warm.tensors))
        graph = eng.capture(g.forward, pool=self.pool, size=size)
        rec = graph.recording
        graph_written = set(rec.written)
        for launch in rec.launches:
            if launch.kind != "triton":
                continue
            for name, v in launch.args.items():
                if isinstance(v, TensorArg) and (launch.name, name) in wrec.kernel_writes:
                    graph_written.add(v.key)
        self.notes.extend(n for n in rec.notes if n not in self.notes)
        self.graphs[size] = graph
        self.infos[size] = CaptureInfo(
            size=size,
            batch=batch,
            prepare_written=prepare_written,
            warmup_written=warmup_written,
            graph_written=graph_written,
            paths=paths_by_storage(g),
            launches=list(rec.launches),
            warmup_launches=list(wrec.launches),
            warmup_kernel_writes=set(wrec.kernel_writes),
        )

    def _graph_buffers(self) -> dict[int, torch.Tensor]:
        ext: set[int] = set()
        for graph in self.graphs.values():
            ext |= {k for k, b in graph.recording.external.items() if b.alive()}
        return {k: t for k, t in storages_of(self.target, self.static_keys).items() if k in ext}

    # -- per example -----------------------------------------------------------------
    def learned_writes(self) -> set:
        """Every (kernel, argument) pair seen written during this session's warm-ups."""
        out: set = set()
        for info in self.infos.values():
            out |= info.warmup_kernel_writes
        return out

    def size_for(self, num_reqs: int) -> int:
        for s in self.sizes:
            if s >= num_reqs and s in self.graphs:
                return s
        raise ValueError(f"no captured size holds {num_reqs} requests (captured: {sorted(self.graphs)})")

    def reset(self, seed: int) -> None:
        self._post.restore_into(storages_of(self.target, self.static_keys))
        randomise_static(self.target, seed)

"""Real CUDA graphs: warm-up on a side stream, capture into a shared pool, replay."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ..errors import CaptureError, UsageError
from . import graph_reader
from .addresses import AddressSpace
from .base import Engine, Graph, as_outputs
from .host import HostMemory
from .recording import Recorder
from .userframe import user_frame_of

__all__ = ["CudaEngine"]


class CudaEngine(Engine):
    """Captures with ``torch.cuda.CUDAGraph``; all sizes of one target share one memory pool."""

    name = "cuda"

    def __init__(self, device: int | str | torch.device | None = None):
        if not torch.cuda.is_available():
            raise UsageError("engine 'cuda' needs an NVIDIA GPU and none is visible; use engine 'emulate' or 'auto'")
        self._device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        if self._device.index is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
        self._stream: torch.cuda.Stream | None = None  # the side stream captures run on (made at the first)
        #: why captures are not read back (None: every capture is, see graph_reader)
        self.reader_off: str | None = graph_reader.unavailable()

    @property
    def device(self) -> torch.device:
        return self._device

    def new_pool(self) -> Any:
        return torch.cuda.graph_pool_handle()

    def warmup(
        self, fn: Callable[[], Any], *, skip_keys: set[int], known: set[tuple[str, frozenset[str]]] | None = None
    ) -> Recorder:
        torch.cuda.synchronize(self._device)
        side = torch.cuda.Stream(self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        rec = Recorder("observe", learn_writes=True, skip_keys=skip_keys)
        rec.known_kernels = set(known or ())
        with torch.cuda.stream(side):
            with rec:
                fn()
        torch.cuda.current_stream(self._device).wait_stream(side)
        torch.cuda.synchronize(self._device)
        return rec

    def prescreen(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` once more under ``torch.cuda.set_sync_debug_mode("error")``.

        The caller ran ``fn`` eagerly just before (the warm-up), so an exception now comes from the
        sync check: ``fn`` synchronises with the host, which a capture cannot hold.  Raised here as a
        :class:`CaptureError` naming the line, before a real capture could break the CUDA context.
        """
        prev = torch.cuda.get_sync_debug_mode()
        with warnings.catch_warnings():  # "sync debug mode is a prototype feature", every time
            warnings.simplefilter("ignore", UserWarning)
            torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
        except Exception as e:
            where = user_frame_of(e)
            raise CaptureError(f"forward() synchronises with the host: {e}", where=where) from e
        finally:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                torch.cuda.set_sync_debug_mode(prev)
        torch.cuda.synchronize(self._device)

    def capture(self, fn: Callable[[], Any], *, pool: Any) -> Graph:
        """Capture ``fn`` on a side stream into ``pool``, with Python's cyclic garbage collector paused.

        What ``torch.cuda.graph`` does, but for its ``empty_cache()`` before every capture: that hands
        every cached block back to the driver, so the next example's allocations pay ``cudaMalloc``
        again; a check captures once per example of its drawn phase, where it is memory enough.

        An old ``CUDAGraph`` kept alive only by a reference cycle (a finished
        example's session, an exception's traceback) is destroyed whenever the
        collector happens to run.  Mid-capture that is ``cudaGraphExecDestroy``
        on a capturing process, which invalidates the capture ("operation failed
        due to a previous error during capture").  torch no longer collects
        before capture unless ``torch.compiler.config.force_cudagraph_gc`` is
        set, so the collector is switched off for the capture instead.
        """
        graph = self._new_graph()
        rec = Recorder("capture", host=HostMemory(self._device))  # CPU tensors are host memory
        if self._stream is None:
            self._stream = torch.cuda.Stream(self._device)
        torch.cuda.synchronize(self._device)
        collecting = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.stream(self._stream):
                graph.capture_begin(pool=pool)
                try:
                    # the recorder goes inside: capture_begin's own ops (RNG state set-up) are not forward()'s
                    with rec:
                        out = fn()
                        outs = as_outputs(out)
                finally:
                    graph.capture_end()
        finally:
            if collecting:
                gc.enable()
        torch.cuda.synchronize(self._device)
        result = Graph(
            outs, rec, graph.replay, single=isinstance(out, torch.Tensor)
        )  # the bound replay keeps the CUDAGraph alive
        self._read(graph, result)
        return result

    def _new_graph(self) -> torch.cuda.CUDAGraph:
        """A graph that keeps its ``cudaGraph_t`` for the reader, when it is on (torch >= 2.11 has the option)."""
        if self.reader_off is None:
            try:
                return torch.cuda.CUDAGraph(keep_graph=True)
            except TypeError:
                self.reader_off = (
                    f"the graph reader needs torch.cuda.CUDAGraph(keep_graph=True) (torch {torch.__version__})"
                )
        return torch.cuda.CUDAGraph()

    def _read(self, graph: torch.cuda.CUDAGraph, result: Graph) -> None:
        """Read ``graph``'s nodes into ``result`` (once per capture), then instantiate it for replay; a note
        instead when the reader is off or fails."""
        if self.reader_off is not None:
            result.recording.notes.append(f"graph reader off: {self.reader_off}")
            return
        space = AddressSpace()
        try:
            result.read = graph_reader.read_graph(graph.raw_cuda_graph(), space)
            result.space = space
        except Exception as e:  # noqa: BLE001 - an unreadable graph still replays; findings then come without it
            result.recording.notes.append(f"graph reader: a captured graph could not be read ({type(e).__name__}: {e})")
        graph.instantiate()

    def rehearse(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` once eagerly as a capture's warm-up does (on a side stream), recording nothing."""
        torch.cuda.synchronize(self._device)
        side = torch.cuda.Stream(self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream(self._device).wait_stream(side)
        torch.cuda.synchronize(self._device)

    def healthy(self) -> bool:
        """False when the context can no longer run work: a capture left open, a sticky device error
        (a tiny op fails), or a random generator left in capture mode by a failed capture (the next
        CUDA random call fails: measured on an H100)."""
        try:
            if torch.cuda.is_current_stream_capturing():
                return False
            self.synchronize()  # a replay left unwaited for is over then (the hang watch's clock too)
            x = torch.ones(4, device=self._device)
            r = torch.rand(4, device=self._device)  # a failed capture can leave the generator unusable
            return bool((x + 1).sum().item() == 8) and bool(((r >= 0) & (r <= 1)).all().item())
        except Exception:
            return False

"""The interface both engines implement: warm up, capture once, replay many times."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import ContractError
from . import replay_clock
from .recording import ExternalBuffer, Recorder

__all__ = ["Engine", "Graph", "as_outputs", "returned"]


def as_outputs(out: Any, where: str = "forward()") -> tuple[torch.Tensor, ...]:
    """forward()'s return as a tuple of tensors; a :class:`ContractError` unless it is a tensor or a
    non-empty tuple of tensors (a list is not: ``live()`` gets what forward() returned, and graphsafe
    gives back the same structure)."""
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, tuple) and out and all(isinstance(t, torch.Tensor) for t in out):
        return out
    if isinstance(out, list):
        kinds = "list (return a tuple)"
    else:
        kinds = (
            type(out).__name__ if not isinstance(out, tuple) else "(" + ", ".join(type(t).__name__ for t in out) + ")"
        )
    raise ContractError(f"{where} must return a tensor or a non-empty tuple of tensors, got {kinds}")


def returned(outputs: tuple[torch.Tensor, ...], single: bool) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The structure forward() returned: the one tensor when ``single``, else the tuple."""
    return outputs[0] if single else outputs


@dataclass
class Graph:
    """One captured graph: its outputs (graph-owned memory) and what capture recorded."""

    outputs: tuple[torch.Tensor, ...]
    recording: Recorder
    replay_fn: Callable[[], None]
    single: bool = False  # forward() returned one tensor, not a tuple
    size: int = 0  # request slots (set by the capture session)
    poison_views: list | None = None  # byte views of the floating outputs, made at the first replay (StepContext)
    read: Any = None  # the graph's nodes as the graph reader read them (a GraphRead), when it could
    space: Any = None  # the address space that read them (an AddressSpace), until the capture maps them
    host_reads: list = field(default_factory=list)  # host memory the graph reads that the target does not hold

    @property
    def returned(self) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The outputs in the structure forward() returned them (what ``live()`` gets)."""
        return returned(self.outputs, self.single)

    def replay(self) -> None:
        replay_clock.replay_started(self.size)  # done at the engine's next synchronize()
        self.replay_fn()

    def dead_inputs(self) -> list[ExternalBuffer]:
        """External memory the graph reads whose owner freed it since capture."""
        return [b for b in self.recording.external.values() if not b.alive()]


class Engine:
    """Capture and replay backend. Subclasses: ``CudaEngine``, ``EmulatorEngine``."""

    name = "base"

    @property
    def device(self) -> torch.device:  # pragma: no cover - abstract
        raise NotImplementedError

    def new_pool(self) -> Any:
        return None

    def host_memory(self) -> contextlib.AbstractContextManager:
        """Wrap the target's ``setup()`` and the capture's ``prepare()`` in this: an engine whose tensors
        do not say whether they are host or device memory (the CPU emulator) learns it meanwhile."""
        return contextlib.nullcontext()

    def warmup(
        self, fn: Callable[[], Any], *, skip_keys: set[int], known: set[tuple[str, frozenset[str]]] | None = None
    ) -> Recorder:  # pragma: no cover
        """Run ``fn`` once eagerly, recording its launches and which kernel arguments they write (``skip_keys``
        storages aside; the kernels named in ``known``, whose writes an earlier warm-up learned, are not
        learned again: learning clones and compares every argument of a launch)."""
        raise NotImplementedError

    def prescreen(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` once eagerly in a mode that raises on host synchronisation."""
        fn()

    def capture(self, fn: Callable[[], Any], *, pool: Any) -> Graph:  # pragma: no cover
        raise NotImplementedError

    def rehearse(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` once eagerly, as a capture's warm-up does, recording nothing."""
        fn()

    def synchronize(self) -> None:
        """Wait for the device (the emulator runs on a GPU when kernels are compiled for one); a replay
        in flight is over then."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        replay_clock.replay_done()

    def healthy(self) -> bool:
        return True

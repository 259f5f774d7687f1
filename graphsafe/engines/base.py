"""The interface both engines implement: warm up, capture once, replay many times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..errors import ContractError
from .recording import ExternalBuffer, Recorder

__all__ = ["Engine", "Graph", "as_outputs"]


def as_outputs(out: Any, where: str = "forward()") -> tuple[torch.Tensor, ...]:
    """Normalise forward()'s return to a tuple of tensors, or raise a clear TypeError."""
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)) and out and all(isinstance(t, torch.Tensor) for t in out):
        return tuple(out)
    kinds = type(out).__name__ if not isinstance(out, (tuple, list)) else "[" + ", ".join(type(t).__name__ for t in out) + "]"
    raise ContractError(f"{where} must return a tensor or a non-empty tuple of tensors, got {kinds}")


@dataclass
class Graph:
    """One captured graph: its outputs (graph-owned memory) and what capture recorded."""

    outputs: tuple[torch.Tensor, ...]
    recording: Recorder
    replay_fn: Callable[[], None]

    def replay(self) -> None:
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

    def warmup(self, fn: Callable[[], Any], *, skip_keys: set[int], learn: bool = True) -> Recorder:  # pragma: no cover
        """Run ``fn`` once eagerly, recording its launches (and, with ``learn``, which kernel arguments
        they write, ``skip_keys`` storages aside)."""
        raise NotImplementedError

    def prescreen(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` once eagerly in a mode that raises on host synchronisation."""
        fn()

    def capture(self, fn: Callable[[], Any], *, pool: Any) -> Graph:  # pragma: no cover
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for the device (the emulator runs on a GPU when kernels are compiled for one)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def healthy(self) -> bool:
        return True

"""Engines: ``cuda`` (real CUDA graphs) and ``emulate`` (CPU emulation of capture and replay)."""

from __future__ import annotations

import torch

from ..errors import UsageError
from . import replay_clock, triton_env  # noqa: F401  (graphsafe.engines.replay_clock, imported by name)
from .base import Engine, Graph, as_outputs, returned
from .cuda import CudaEngine
from .emulate import EmulatorEngine

__all__ = ["Engine", "Graph", "as_outputs", "returned", "get_engine", "ENGINES"]

#: the engine names every front end accepts (``auto``: cuda when a GPU is visible, else emulate)
ENGINES = ("auto", "cuda", "emulate")


def get_engine(name: str | Engine = "auto", device=None) -> Engine:
    """``auto``: cuda when a GPU is visible, else emulate."""
    if isinstance(name, Engine):
        return name
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "emulate"
    if name == "cuda":
        return CudaEngine(device)
    if name == "emulate":
        if device is None:
            # Kernels compiled for the GPU cannot read CPU tensors: emulate on the GPU then.
            gpu = torch.cuda.is_available() and not triton_env.interpreter_active()
            device = "cuda" if gpu else "cpu"
        return EmulatorEngine(device)
    raise UsageError(f"unknown engine {name!r}: choose one of {', '.join(ENGINES)}")

"""Which engine runs here, and which GPU each pytest-xdist worker uses.

Asked through NVML where torch can, so that the process that asks (pytest's own, which
starts sandboxes) never initialises CUDA.  The GPU count is read once per process: worker
``gwN`` takes GPU ``N % count``, so ``pytest -n 8`` on an 8-GPU host runs one worker per GPU
and ``-n 16`` two.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Iterator

import torch

from ..engines.triton_env import interpreter_active, use_interpreter

__all__ = [
    "cuda_available",
    "gpu_count",
    "interpreter_for",
    "prepare_engine",
    "uses_cuda",
    "engine_problem",
    "worker_id",
    "worker_index",
    "worker_device",
    "assign_device",
]


@contextlib.contextmanager
def _nvml() -> Iterator[None]:
    key = "PYTORCH_NVML_BASED_CUDA_CHECK"
    prev = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if prev is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = prev


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """Visible NVIDIA GPUs (0 without CUDA), counted without initialising CUDA; read once per process."""
    if not torch.backends.cuda.is_built():
        return 0
    with _nvml():
        try:
            return torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception:  # noqa: BLE001 - a broken driver means no CUDA here
            return 0


def cuda_available() -> bool:
    """True when a GPU is visible (without initialising CUDA in this process)."""
    return gpu_count() > 0


def interpreter_for(engine: str) -> bool:
    """True when Triton runs under its interpreter for checks on ``engine`` here: ``emulate``
    always, ``auto`` when no CUDA device is visible, and whenever ``TRITON_INTERPRET`` is on."""
    return engine == "emulate" or interpreter_active() or (engine == "auto" and not cuda_available())


def prepare_engine(engine: str) -> bool:
    """Switch Triton to its interpreter when ``engine`` will be the emulator (:func:`interpreter_for`);
    call before kernels import.  Returns True when the interpreter is active."""
    if interpreter_for(engine):
        return use_interpreter(force=True)  # force=True also patches the autotuner when already on
    return interpreter_active()


def uses_cuda(engine: str) -> bool:
    """True when checks on ``engine`` run on CUDA here (``cuda``, or ``auto`` with a GPU visible)."""
    return engine == "cuda" or (engine == "auto" and cuda_available())


def engine_problem(engine: str) -> str | None:
    """A one-line reason why ``engine`` cannot run here, or None."""
    if engine == "cuda" and not cuda_available():
        return "engine 'cuda' needs an NVIDIA GPU and none is visible; use engine 'emulate' or 'auto'"
    return None


def worker_id() -> str | None:
    """``"gw3"`` inside an xdist worker, else None."""
    return os.environ.get("PYTEST_XDIST_WORKER") or None


def worker_index() -> int | None:
    """3 for worker ``gw3``; None outside xdist (or for an id that is not ``gwN``)."""
    m = re.fullmatch(r"gw(\d+)", worker_id() or "")
    return int(m.group(1)) if m else None


def worker_device(engine: str) -> int | None:
    """The GPU this xdist worker's checks use (``index % gpu_count()``), or None outside xdist,
    on the emulator, or without CUDA.  Nothing is made current: a sandbox child does that."""
    idx = worker_index()
    if idx is None or engine == "emulate" or gpu_count() == 0:
        return None
    return idx % gpu_count()


def assign_device(engine: str) -> int | None:
    """Make this worker's GPU (:func:`worker_device`) current in this process; return it.

    Call it when graphsafe is about to run, not at start-up: ``set_device`` creates a CUDA context.
    """
    dev = worker_device(engine)
    if dev is not None:
        torch.cuda.set_device(dev)
    return dev

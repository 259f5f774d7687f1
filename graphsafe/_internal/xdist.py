"""pytest-xdist support: which worker this process is, and which GPU it uses.

Each worker takes GPU ``worker index % torch.cuda.device_count()``, so
``pytest -n 8`` on an 8-GPU host runs one worker per GPU and ``-n 16`` two.
"""

from __future__ import annotations

import os
import re

__all__ = ["worker_id", "worker_index", "assign_device"]


def worker_id() -> str | None:
    """``"gw3"`` inside an xdist worker, else None."""
    return os.environ.get("PYTEST_XDIST_WORKER") or None


def worker_index() -> int | None:
    """3 for worker ``gw3``; None outside xdist (or for an id that is not ``gwN``)."""
    wid = worker_id()
    m = re.fullmatch(r"gw(\d+)", wid or "")
    return int(m.group(1)) if m else None


def assign_device(engine: str) -> int | None:
    """In an xdist worker whose engine is CUDA, make GPU ``index % count`` current; return it.

    Returns None (and does nothing) outside xdist, on the emulator, or without CUDA.
    Call it when graphsafe is about to run, not at start-up: ``set_device``
    creates a CUDA context.
    """
    idx = worker_index()
    if idx is None or engine == "emulate":
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    count = torch.cuda.device_count()
    if count < 1:
        return None
    dev = idx % count
    torch.cuda.set_device(dev)
    return dev

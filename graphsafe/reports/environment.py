"""Versions and hardware a report records: Python, torch, triton, graphsafe, the GPU."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform

import torch

from .._version import __version__

__all__ = ["environment"]


def _triton_version() -> str | None:
    """triton's version when it is importable, else None (never imports triton itself)."""
    try:
        if importlib.util.find_spec("triton") is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        try:
            import triton  # noqa: PLC0415 - only when no distribution metadata is installed: never before kernels

            return str(getattr(triton, "__version__", "unknown"))
        except Exception:  # noqa: BLE001
            return None


def _gpu() -> str:
    try:
        if not torch.cuda.is_available():
            return "none (CPU)"
        return torch.cuda.get_device_name()
    except Exception as e:  # noqa: BLE001 - a broken CUDA context must not stop the report
        return f"unknown ({type(e).__name__}: {e})"


def environment() -> dict[str, str | None]:
    """What ran the check: ``python``, ``torch``, ``triton`` (None if not importable), ``graphsafe``, ``cuda``, ``gpu``, ``platform``."""
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "triton": _triton_version(),
        "graphsafe": __version__,
        "cuda": getattr(torch.version, "cuda", None),
        "gpu": _gpu(),
        "platform": platform.platform(),
    }

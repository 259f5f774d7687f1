"""Triton set-up: the interpreter on machines without a GPU, autotune that works under it.

The Triton interpreter must be switched on before any ``@triton.jit`` function
is defined, so :func:`use_interpreter` must run before kernel modules are
imported.  ``graphsafe.reference``, the pytest plugin and the command line
call it for you.
"""

from __future__ import annotations

import os
import threading

import torch

__all__ = ["use_interpreter", "interpreter_active", "autotune_benchmarking"]

_local = threading.local()


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def autotune_benchmarking() -> bool:
    """True while an autotuner is benchmarking configs (those launches are not part of a graph)."""
    return getattr(_local, "benchmarking", False)


def _interp_bench(kernel_call, quantiles=None, **_):
    """Deterministic stand-in for Triton's benchmarker under the interpreter.

    Runs the candidate once (so a config that cannot run still fails) and
    reports the same time for every config: the autotuner then keeps the
    first config that runs, the same choice on every machine and every run.
    """
    _local.benchmarking = True
    try:
        kernel_call()
    finally:
        _local.benchmarking = False
    if quantiles:
        return [1.0 for _ in quantiles]
    return 1.0


def _patch_autotuner() -> None:
    try:  # triton is imported on first use: TRITON_INTERPRET must be set before its first import
        from triton.runtime.autotuner import Autotuner
    except Exception:  # pragma: no cover - triton missing
        return
    if getattr(Autotuner, "_graphsafe_patched", False):
        return
    Autotuner.do_bench = property(lambda self: _interp_bench)
    Autotuner._graphsafe_patched = True


def use_interpreter(force: bool | None = None) -> bool:
    """Switch Triton to its interpreter when no CUDA device is present (or when ``force``).

    Returns True when the interpreter is active.  Call before kernels are defined.
    """
    if force is None:
        if interpreter_active():
            force = True
        else:
            force = not torch.cuda.is_available()
    if force:
        os.environ["TRITON_INTERPRET"] = "1"
        _patch_autotuner()
    return interpreter_active()

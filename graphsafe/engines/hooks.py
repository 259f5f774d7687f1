"""Where a recorder hooks in: the aten dispatcher (a ``TorchDispatchMode``) and Triton's launcher.

Both hooks hand each call to the :class:`~graphsafe.engines.recording.Recorder` recording on this thread
(:func:`active`), or run it untouched when none is, when it is suspended, or while Triton's autotuner
benchmarks configurations.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from torch.utils._python_dispatch import TorchDispatchMode

from . import triton_env


class Recording(Protocol):
    """What the hooks need of a recorder (:class:`~graphsafe.engines.recording.Recorder`; this module does not
    import it: the recorder imports the hooks)."""

    suspended: bool

    def _on_aten(self, func: Any, args: Any, kwargs: Any) -> Any: ...

    def _on_triton(self, kernel: Any, orig_run: Any, args: Any, kwargs: Any, grid: Any) -> Any: ...


__all__ = ["Recording", "RecorderMode", "active", "install_triton_hooks", "local"]

#: per thread, ``recorder``: the recorder recording on this thread now
local = threading.local()


def active() -> Recording | None:
    """The recorder recording on this thread now, if any."""
    return getattr(local, "recorder", None)


class RecorderMode(TorchDispatchMode):
    """Hands every aten op to ``rec`` (the recorder that entered this mode)."""

    def __init__(self, rec: Recording):
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rec = self.rec
        if rec.suspended:
            return func(*args, **kwargs)
        return rec._on_aten(func, args, kwargs)


_orig_runs: dict[type, Callable] = {}


def install_triton_hooks() -> None:
    """Wrap ``run`` of Triton's JIT (and interpreted) kernels once per process."""
    classes = []
    try:  # triton is imported on first use: TRITON_INTERPRET must be set before its first import
        from triton.runtime.jit import JITFunction

        classes.append(JITFunction)
    except Exception:  # pragma: no cover - no triton
        return
    try:  # (as above)
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except Exception:  # pragma: no cover
        pass
    for cls in classes:
        if cls in _orig_runs:
            continue
        orig = cls.run
        _orig_runs[cls] = orig

        def run(self, *args, grid, warmup, _orig=orig, **kwargs):
            rec: Recording | None = getattr(local, "recorder", None)
            if rec is None or warmup or rec.suspended or triton_env.autotune_benchmarking():
                return _orig(self, *args, grid=grid, warmup=warmup, **kwargs)
            return rec._on_triton(self, _orig, args, kwargs, grid)

        cls.run = run

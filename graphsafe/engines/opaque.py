"""``opaque_call``: a kernel call graphsafe cannot see into, recorded as one launch; ``GRAPHSAFE_OPAQUE=0`` turns
every such call (and ``graphsafe.flashinfer.watch``) into a plain one."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import triton_env
from .hooks import local as _local

__all__ = ["opaque_call", "opaque_enabled"]


def opaque_enabled() -> bool:
    """False when ``GRAPHSAFE_OPAQUE=0``: every :func:`opaque_call` (and ``graphsafe.flashinfer.watch``) is then a
    plain call that records nothing, so that only what graphsafe sees by itself (the aten dispatcher, Triton,
    and on the CUDA engine the graph reader) explains a target.  Read at every call (a test can switch it)."""
    return os.environ.get("GRAPHSAFE_OPAQUE", "1") != "0"


def opaque_call(
    name: str,
    fn: Callable[..., Any],
    *args: Any,
    arg_names: Sequence[str | None] = (),
    host_values: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)``, a kernel graphsafe cannot see into, recorded as one launch named ``name``.

    For calls that reach the device outside the aten dispatcher and Triton (an extension module
    called through TVM-FFI, pybind11 or ctypes): without this, a capture records nothing of them, so
    a pointer they read that goes stale, or a host value they froze, shows only as an output
    difference.  Every tensor among the arguments is memory the call reads (which ones it writes is
    learned during warm-up, as for a Triton kernel), every other argument a host value the capture
    freezes, named by ``arg_names`` (``arg<i>`` past its end; a ``None`` name leaves the argument
    out of the record) or by its keyword.  ``host_values`` adds values the call depends on that are
    not plain arguments (the fields of a plan, say).  Outside a capture, or with ``GRAPHSAFE_OPAQUE=0``
    (:func:`opaque_enabled`), it is just the call.  The CPU
    emulator replays the call with the arguments it was captured with, so ``fn`` must take
    everything it uses as arguments.

    Example::

        out = graphsafe.opaque_call("mylib.decode", mylib_ext.decode, q, kv_cache, plan_info, out,
                                    arg_names=("q", "kv_cache", "plan_info", "out"))
    """
    rec = getattr(_local, "recorder", None)
    if rec is None or rec.suspended or triton_env.autotune_benchmarking() or not opaque_enabled():
        return fn(*args, **kwargs)
    return rec._on_opaque(name, fn, args, kwargs, tuple(arg_names), dict(host_values or {}))

"""Targets made from a backend by reference: ``sglang:<module:Class>``, an ``AttentionBackend`` of SGLang's
or one's own, driven as SGLang's decode CUDA-graph runner drives it.

The class :func:`for_backend` makes is importable by name from this module (an attribute this module makes on
demand), so a sandbox process can load the very same class; nothing imports SGLang until its ``setup()``.

Example::

    cls = graphsafe.sglang.for_backend("my_fork.attention:MyAttnBackend")
    graphsafe.check(cls, engine="cuda")     # the same as graphsafe.check("sglang:my_fork.attention:MyAttnBackend")
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import UsageError
from .adapter import SglangTarget

__all__ = ["for_backend", "parse"]

_TAG = "BACKEND_"


@functools.cache
def for_backend(ref: str) -> type:
    """The target class for backend ``ref`` (``"module:Class"``, or ``"triton"`` / ``"flashinfer"``); the
    same class for the same argument."""
    if not isinstance(ref, str) or not ref:
        raise UsageError(f"an SGLang backend reference must be 'module:Class', got {ref!r}")
    attr = _TAG + ref.encode().hex()
    return type(
        attr,
        (SglangTarget,),
        {
            "__module__": __name__,
            "__qualname__": attr,
            "__doc__": f"SGLang attention backend {ref}, driven as SGLang's decode CUDA-graph runner drives it.",
            "name": f"sglang:{ref}",
            "backend": ref,
            "expected": None,
        },
    )


def parse(name: str) -> type | None:
    """The class for ``sglang:<ref>``; None for another name."""
    prefix, sep, ref = name.partition(":")
    return for_backend(ref) if sep and ref and prefix == "sglang" else None


def __getattr__(attr: str) -> Any:
    if attr.startswith(_TAG):
        try:
            return for_backend(bytes.fromhex(attr[len(_TAG) :]).decode())
        except ValueError:
            pass
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

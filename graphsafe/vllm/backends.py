"""Targets made from a backend by reference: ``vllm:<ref>`` and ``vllm-mla:<ref>``, where ``<ref>`` is a name of
vLLM's backend registry (``FLASH_ATTN``) or the ``module:Class`` of a backend of one's own.

The class :func:`for_backend` makes is importable by name from this module (an attribute this module makes
on demand), so a sandbox process can load the very same class, and nothing imports vLLM until the target's
``setup()``.

Example::

    cls = graphsafe.vllm.for_backend("my_fork.attention:MyAttentionBackend")
    graphsafe.check(cls, engine="cuda")          # the same as graphsafe.check("vllm:my_fork.attention:MyAttentionBackend")
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import UsageError
from .kinds import AttentionTarget, MLATarget

__all__ = ["for_backend", "PREFIXES"]

#: target-name prefixes: a standard attention backend, an MLA backend
PREFIXES = {"vllm": False, "vllm-mla": True}


def _attribute(ref: str, mla: bool) -> str:
    """This module's attribute name for a backend reference (hex-encoded, so any reference is an identifier)."""
    return ("MLA_" if mla else "ATTN_") + ref.encode().hex()


def for_backend(ref: str, mla: bool = False) -> type:
    """The target class for backend ``ref`` (a registry name or ``"module:Class"``); an MLA backend's with ``mla``
    (its decode, ``forward_mqa``).  The same class for the same arguments."""
    return _made(ref, bool(mla))


@functools.cache
def _made(ref: str, mla: bool) -> type:
    if not isinstance(ref, str) or not ref:
        raise UsageError(f"a vLLM backend reference must be a registry name or 'module:Class', got {ref!r}")
    base = MLATarget if mla else AttentionTarget
    prefix = "vllm-mla" if mla else "vllm"
    attr = _attribute(ref, mla)
    return type(
        attr,
        (base,),
        {
            "__module__": __name__,
            "__qualname__": attr,
            "__doc__": f"vLLM attention backend {ref}, driven as vLLM's model runner drives it.",
            "name": f"{prefix}:{ref}",
            "backend": ref,
            "expected": None,
        },
    )


def parse(name: str) -> type | None:
    """The class for ``vllm:<ref>`` or ``vllm-mla:<ref>``; None for another name."""
    prefix, sep, ref = name.partition(":")
    if not sep or prefix not in PREFIXES:
        return None
    return for_backend(ref, PREFIXES[prefix])


def __getattr__(attr: str) -> Any:
    for tag, mla in (("ATTN_", False), ("MLA_", True)):
        if attr.startswith(tag):
            try:
                ref = bytes.fromhex(attr[len(tag) :]).decode()
            except ValueError:
                break
            return for_backend(ref, mla)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

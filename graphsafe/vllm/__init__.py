"""vLLM's own attention backends under graphsafe: the classes vLLM ships, driven as its model runner drives
them, with deliberate mistakes in vLLM's real classes beside them.

Nothing here imports vLLM until a target's ``setup()`` runs (``library = "vllm"``); the stand-in
(``library = "standin"``, :mod:`graphsafe.vllm.standin`) runs the same adapter on the CPU.

* :class:`VllmTarget`, :class:`AttentionTarget`, :class:`MLATarget`: the adapter (:mod:`.adapter`,
  :mod:`.kinds`), the base classes for one's own backend;
* ``vllm:TRITON_ATTN``, ``vllm:TRITON_MLA``, ``vllm:FLEX_ATTENTION`` (:mod:`.targets`), and the buggy variants
  (:mod:`.variants`, ``vllm:TRITON_ATTN:stale_pad_slots``, ...);
* ``vllm:<registry name or module:Class>`` and ``vllm-mla:<...>``: any backend (:func:`for_backend`);
* :func:`names`, :func:`resolve`, :func:`requirement`: the registry, without importing vLLM.

Example::

    graphsafe.check("vllm:TRITON_ATTN", engine="cuda")
    graphsafe.check("vllm:my_fork.attention:MyAttentionBackend", engine="cuda")
"""

from __future__ import annotations

import importlib

from ..errors import UsageError
from .adapter import MODELS, FromBuilder, VllmTarget
from .backends import PREFIXES, for_backend, parse
from .kinds import AttentionTarget, MLATarget
from .library import INSTALL_HINT, requirement

__all__ = [
    "VllmTarget",
    "AttentionTarget",
    "MLATarget",
    "FromBuilder",
    "MODELS",
    "for_backend",
    "names",
    "resolve",
    "is_vllm_name",
    "requirement",
    "INSTALL_HINT",
    "SAFE",
    "BUGGY",
    "TWIN_OF",
]

# name -> (module, class)
_TARGETS: dict[str, tuple[str, str]] = {
    "vllm:TRITON_ATTN": ("targets", "TritonAttention"),
    "vllm:TRITON_MLA": ("targets", "TritonMLA"),
    "vllm:FLEX_ATTENTION": ("targets", "FlexAttention"),
    "vllm:TRITON_ATTN:stale_pad_slots": ("variants", "TritonAttentionStalePadSlots"),
    "vllm:TRITON_ATTN:decode_shortcut": ("variants", "TritonAttentionDecodeShortcut"),
    "vllm:TRITON_ATTN:fresh_seq_lens": ("variants", "TritonAttentionFreshSeqLens"),
    "vllm:TRITON_MLA:fresh_decode_metadata": ("variants", "TritonMLAFreshDecodeMetadata"),
    "vllm:TRITON_MLA:lazy_row_plan": ("variants", "TritonMLALazyRowPlan"),
    "vllm:FLEX_ATTENTION:fresh_block_mask": ("variants", "FlexAttentionFreshBlockMask"),
}

#: vLLM's backends as shipped (no finding expected)
SAFE = ["vllm:TRITON_ATTN", "vllm:TRITON_MLA", "vllm:FLEX_ATTENTION"]
#: the deliberate mistakes
BUGGY = [n for n in _TARGETS if n not in SAFE]
#: each buggy variant's safe twin
TWIN_OF = {n: n.rpartition(":")[0] for n in BUGGY}


def names() -> list[str]:
    """Every registered vLLM target name (vLLM's backends first)."""
    return SAFE + BUGGY


def is_vllm_name(name: str) -> bool:
    """Does ``name`` name a vLLM target (registered, or ``vllm:<ref>`` / ``vllm-mla:<ref>``)?"""
    return name in _TARGETS or name.partition(":")[0] in PREFIXES and ":" in name


def resolve(name: str) -> type:
    """The class for a registered name, or for ``vllm:<ref>`` / ``vllm-mla:<ref>`` (any backend); a
    :class:`UsageError` naming the registered ones otherwise."""
    entry = _TARGETS.get(name)
    if entry is not None:
        module, attr = entry
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    cls = parse(name) if isinstance(name, str) else None
    if cls is None:
        raise UsageError(f"unknown vLLM target {name!r}; known: {', '.join(names())}, or vllm:<backend>")
    return cls

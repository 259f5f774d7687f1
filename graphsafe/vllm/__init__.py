"""vLLM's own attention backends under graphsafe: the classes vLLM ships, driven as its model runner drives
them, with deliberate mistakes in vLLM's real classes beside them.

Nothing here imports vLLM until a target's ``setup()`` runs (``library = "vllm"``); the stand-in
(``library = "standin"``, :mod:`graphsafe.vllm.standin`) runs the same adapter on the CPU.

* :class:`VllmTarget`, :class:`AttentionTarget`, :class:`MLATarget`: the adapter (:mod:`.adapter`,
  :mod:`.kinds`), the base classes for one's own backend;
* ``vllm:TRITON_ATTN``, ``vllm:TRITON_MLA``, ``vllm:FLEX_ATTENTION`` (:mod:`.targets`), and the buggy variants
  (:mod:`.variants`, ``vllm:TRITON_ATTN:stale_pad_slots``, ...);
* ``vllm:<registry name or module:Class>`` and ``vllm-mla:<...>``: any backend (:func:`for_backend`);
* :data:`FAMILY` (:func:`names`, :func:`resolve`, :func:`requirement`): the registry, without importing vLLM.

Example::

    graphsafe.check("vllm:TRITON_ATTN", engine="cuda")
    graphsafe.check("vllm:my_fork.attention:MyAttentionBackend", engine="cuda")
"""

from __future__ import annotations

from .adapter import MODELS, FromBuilder, VllmTarget
from .backends import for_backend
from .kinds import AttentionTarget, MLATarget
from .library import FAMILY, INSTALL_HINT, requirement

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
    "FAMILY",
]

#: vLLM's backends as shipped (no finding expected)
SAFE = list(FAMILY.safe)
#: the deliberate mistakes
BUGGY = FAMILY.buggy
#: each buggy variant's safe twin
TWIN_OF = FAMILY.twin_of
names = FAMILY.names
is_vllm_name = FAMILY.owns
resolve = FAMILY.resolve

"""SGLang's own attention backends under graphsafe: the classes SGLang ships, driven as its decode CUDA-graph
runner drives them, with deliberate mistakes in SGLang's real classes beside them.

Nothing here imports SGLang until a target's ``setup()`` runs (``library = "sglang"``); the stand-in
(``library = "standin"``, :mod:`graphsafe.sglang.standin`) runs the same adapter on the CPU.

* :class:`SglangTarget`: the adapter (:mod:`.adapter`), the base class for one's own backend;
* ``sglang:triton``, ``sglang:flashinfer`` (:mod:`.targets`), and the buggy variants (:mod:`.variants`,
  ``sglang:triton:fresh_kv_indptr``, ...);
* ``sglang:<module:Class>``: any backend (:func:`for_backend`);
* :data:`FAMILY` (:func:`names`, :func:`resolve`, :func:`requirement`): the registry, without importing SGLang.

Example::

    graphsafe.check("sglang:triton", engine="cuda")
    graphsafe.check("sglang:my_fork.attention:MyAttnBackend", engine="cuda")
"""

from __future__ import annotations

from .adapter import SglangTarget
from .backends import for_backend
from .library import FAMILY, INSTALL_HINT, requirement

__all__ = [
    "SglangTarget",
    "for_backend",
    "names",
    "resolve",
    "requirement",
    "INSTALL_HINT",
    "SAFE",
    "BUGGY",
    "TWIN_OF",
    "FAMILY",
]

#: SGLang's backends as shipped (no finding expected)
SAFE = list(FAMILY.safe)
#: the deliberate mistakes
BUGGY = FAMILY.buggy
#: each buggy variant's safe twin
TWIN_OF = FAMILY.twin_of
names = FAMILY.names
resolve = FAMILY.resolve

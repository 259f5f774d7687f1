"""FlashInfer under graphsafe: its paged decode, prefill and MLA wrappers, captured as serving engines
capture them, with deliberate mistakes beside them.

Nothing here imports FlashInfer until a target's ``setup()`` runs (``library = "flashinfer"``); the
stand-in (``library = "standin"``, :mod:`graphsafe.flashinfer.standin`) runs the same targets on the CPU.

* :class:`FlashInferTarget` and :class:`Decode`, :class:`Prefill`, :class:`MLA`: the base class for your
  own FlashInfer-based backend and the three wrappers (registered as ``flashinfer:decode``,
  ``flashinfer:prefill``, ``flashinfer:mla``);
* :mod:`graphsafe.flashinfer.variants`: the buggy variants (``flashinfer:decode:default_mode``, ...);
* :func:`watch`: make a wrapper's TVM-FFI kernel calls visible to the recorder (the targets use it);
* :func:`names`, :func:`resolve`, :func:`requirement`: the registry, without importing FlashInfer.

Example::

    graphsafe.check("flashinfer:decode", engine="cuda")
    graphsafe.check(graphsafe.flashinfer.Decode)       # the same class
"""

from __future__ import annotations

from .library import FAMILY, INSTALL_HINT, requirement
from .targets import MLA, Decode, FlashInferTarget, Layout, Prefill
from .watch import watch

__all__ = [
    "FlashInferTarget",
    "Decode",
    "Prefill",
    "MLA",
    "Layout",
    "watch",
    "names",
    "resolve",
    "requirement",
    "INSTALL_HINT",
    "SAFE",
    "BUGGY",
    "TWIN_OF",
    "FAMILY",
]

#: targets that follow FlashInfer's documented CUDA-graph usage (no finding expected)
SAFE = list(FAMILY.safe)
#: the deliberate mistakes
BUGGY = FAMILY.buggy
#: each buggy variant's safe twin
TWIN_OF = FAMILY.twin_of
names = FAMILY.names
resolve = FAMILY.resolve

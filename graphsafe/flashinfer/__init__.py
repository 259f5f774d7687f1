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

import importlib

from ..errors import UsageError
from .library import INSTALL_HINT, requirement
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
]

# name -> (module, class)
_TARGETS: dict[str, tuple[str, str]] = {
    "flashinfer:decode": ("targets", "Decode"),
    "flashinfer:decode:tensor_cores": ("variants", "DecodeTensorCores"),
    "flashinfer:prefill": ("targets", "Prefill"),
    "flashinfer:mla": ("targets", "MLA"),
    "flashinfer:decode:default_mode": ("variants", "DecodeDefaultMode"),
    "flashinfer:decode:growing_workspace": ("variants", "DecodeGrowingWorkspace"),
    "flashinfer:decode:stale_padding": ("variants", "DecodeStalePadding"),
    "flashinfer:decode:fixed_split": ("variants", "DecodeFixedSplit"),
    "flashinfer:mla:mixed_batches": ("variants", "MLAMixedBatches"),
}

#: targets that follow FlashInfer's documented CUDA-graph usage (no finding expected)
SAFE = ["flashinfer:decode", "flashinfer:decode:tensor_cores", "flashinfer:prefill", "flashinfer:mla"]
#: the deliberate mistakes
BUGGY = [n for n in _TARGETS if n not in SAFE]
#: each buggy variant's safe twin
TWIN_OF = {
    "flashinfer:decode:default_mode": "flashinfer:decode",
    "flashinfer:decode:growing_workspace": "flashinfer:decode",
    "flashinfer:decode:stale_padding": "flashinfer:decode",
    "flashinfer:decode:fixed_split": "flashinfer:decode:tensor_cores",
    "flashinfer:mla:mixed_batches": "flashinfer:mla",
}


def names() -> list[str]:
    """Every registered FlashInfer target name (safe targets first)."""
    return SAFE + BUGGY


def resolve(name: str) -> type:
    """The class registered as ``name``; a :class:`UsageError` naming the known ones otherwise."""
    try:
        module, cls = _TARGETS[name]
    except KeyError:
        raise UsageError(f"unknown FlashInfer target {name!r}; known: {', '.join(names())}") from None
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)

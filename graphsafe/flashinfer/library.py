"""Which FlashInfer a target drives: the real library (imported on first use only) or the CPU stand-in, and
the FlashInfer family of targets (:data:`FAMILY`)."""

from __future__ import annotations

import importlib
from typing import Any

from ..family import Family

__all__ = ["FAMILY", "load", "submodule", "requirement", "version", "INSTALL_HINT"]

#: what a FlashInfer target needs, said wherever one cannot run
INSTALL_HINT = (
    "FlashInfer targets need the flashinfer-python package (pip install 'graphsafe[flashinfer]') and an "
    "NVIDIA GPU; without them, graphsafe.flashinfer.standin (library = 'standin') runs the same targets "
    "on the CPU emulator"
)


#: the FlashInfer targets: the wrappers driven as documented, then the deliberate mistakes
FAMILY = Family(
    prefix="flashinfer",
    package="graphsafe.flashinfer",
    targets={
        "flashinfer:decode": "targets:Decode",
        "flashinfer:decode:tensor_cores": "variants:DecodeTensorCores",
        "flashinfer:prefill": "targets:Prefill",
        "flashinfer:mla": "targets:MLA",
        "flashinfer:decode:default_mode": "variants:DecodeDefaultMode",
        "flashinfer:decode:growing_workspace": "variants:DecodeGrowingWorkspace",
        "flashinfer:decode:stale_padding": "variants:DecodeStalePadding",
        "flashinfer:decode:fixed_split": "variants:DecodeFixedSplit",
        "flashinfer:mla:mixed_batches": "variants:MLAMixedBatches",
    },
    safe=("flashinfer:decode", "flashinfer:decode:tensor_cores", "flashinfer:prefill", "flashinfer:mla"),
    twin_of_={"flashinfer:decode:fixed_split": "flashinfer:decode:tensor_cores"},
    library="flashinfer",
    install_hint=INSTALL_HINT,
)


def load(library: Any) -> Any:
    """The library object for a target's ``library`` attribute: ``"flashinfer"`` (the real one),
    ``"standin"`` (:mod:`graphsafe.flashinfer.standin`) or a module with the same wrappers."""
    return FAMILY.load(library)


def submodule(lib: Any, name: str) -> Any:
    """``lib.<name>`` (``mla``): an attribute of the stand-in, a subpackage imported on demand of FlashInfer."""
    sub = getattr(lib, name, None)
    return sub if sub is not None else importlib.import_module(f"{lib.__name__}.{name}")


def requirement(library: Any = "flashinfer") -> str | None:
    """None when targets of ``library`` can run here, else one line saying what is missing (nothing is
    imported beyond what that takes: FlashInfer's presence is looked up, not imported)."""
    return FAMILY.requirement(library)


version = FAMILY.version

"""Which FlashInfer a target drives: the real library (imported on first use only) or the CPU stand-in."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ..errors import ContractError

__all__ = ["load", "submodule", "requirement", "version", "INSTALL_HINT"]

#: what a FlashInfer target needs, said wherever one cannot run
INSTALL_HINT = (
    "FlashInfer targets need the flashinfer-python package (pip install 'graphsafe[flashinfer]') and an "
    "NVIDIA GPU; without them, graphsafe.flashinfer.standin (library = 'standin') runs the same targets "
    "on the CPU emulator"
)


def _import_flashinfer() -> ModuleType:
    try:
        return importlib.import_module("flashinfer")
    except Exception as e:  # noqa: BLE001 - any failure to import is "FlashInfer is missing here"
        raise ContractError(f"flashinfer does not import ({type(e).__name__}: {e}); {INSTALL_HINT}") from None


def load(library: Any) -> Any:
    """The library object for a target's ``library`` attribute: ``"flashinfer"`` (the real one),
    ``"standin"`` (:mod:`graphsafe.flashinfer.standin`) or a module with the same wrappers."""
    if library == "flashinfer":
        return _import_flashinfer()
    if library == "standin":
        from . import standin  # imported on demand: most processes never need the stand-in

        return standin
    if isinstance(library, str):
        raise ContractError(f"library must be 'flashinfer', 'standin' or a module, got {library!r}")
    return library


def submodule(lib: Any, name: str) -> Any:
    """``lib.<name>`` (``mla``): an attribute of the stand-in, a subpackage imported on demand of FlashInfer."""
    sub = getattr(lib, name, None)
    return sub if sub is not None else importlib.import_module(f"{lib.__name__}.{name}")


def requirement(library: Any = "flashinfer") -> str | None:
    """None when targets of ``library`` can run here, else one line saying what is missing (nothing is
    imported beyond what that takes: FlashInfer's presence is looked up, not imported)."""
    if library != "flashinfer":
        return None
    import importlib.util  # (a lookup, not an import of FlashInfer)

    if importlib.util.find_spec("flashinfer") is None:
        return f"flashinfer-python is not installed; {INSTALL_HINT}"
    import torch  # graphsafe's own dependency: imported only when FlashInfer is there to use it

    if not torch.cuda.is_available():
        return f"no NVIDIA GPU is visible; {INSTALL_HINT}"
    return None


def version(lib: Any) -> str:
    """The library's version string (the stand-in says it is one)."""
    return str(getattr(lib, "__version__", "unknown"))

"""Which vLLM a target drives: the real one (imported on first use only) or the CPU stand-in.

Both are reached through the same small interface (:mod:`graphsafe.vllm.real` for vLLM,
:mod:`graphsafe.vllm.standin` for the stand-in): the classes a model runner hands to a backend
(``CommonAttentionMetadata``, the KV-cache specs, ``VllmConfig``) and a lookup of backend classes.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

from ..errors import ContractError

__all__ = ["load", "requirement", "version", "INSTALL_HINT", "ENVIRONMENT"]

#: what a vLLM target needs, said wherever one cannot run
INSTALL_HINT = (
    "vLLM targets need vLLM (pip install 'graphsafe[vllm]') and an NVIDIA GPU; without them, "
    "graphsafe.vllm.standin (library = 'standin') runs the same adapter on the CPU emulator"
)

#: set (when unset) before vLLM is imported: no usage reports, no downloads, quiet logs
ENVIRONMENT = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
    "TOKENIZERS_PARALLELISM": "false",
}


def _import_real() -> ModuleType:
    for k, v in ENVIRONMENT.items():
        os.environ.setdefault(k, v)
    try:
        importlib.import_module("vllm.config")
    except Exception as e:  # noqa: BLE001 - any failure to import is "vLLM is missing or broken here"
        raise ContractError(f"vllm does not import ({type(e).__name__}: {e}); {INSTALL_HINT}") from None
    from . import real  # imports vLLM's attention interfaces

    return real


def load(library: Any) -> Any:
    """The interface for a target's ``library``: ``"vllm"`` (the real one), ``"standin"``
    (:mod:`graphsafe.vllm.standin`) or a module with the same functions."""
    if library == "vllm":
        return _import_real()
    if library == "standin":
        from . import standin  # imported on demand: most processes never need it

        return standin
    if isinstance(library, str):
        raise ContractError(f"library must be 'vllm', 'standin' or a module, got {library!r}")
    return library


def requirement(library: Any = "vllm") -> str | None:
    """None when targets of ``library`` can run here, else one line saying what is missing (vLLM's
    presence is looked up, not imported: importing it takes seconds)."""
    if library != "vllm":
        return None
    import importlib.util  # (a lookup, not an import of vLLM)

    if importlib.util.find_spec("vllm") is None:
        return f"vllm is not installed; {INSTALL_HINT}"
    import torch  # graphsafe's own dependency: imported only when vLLM is there to use it

    if not torch.cuda.is_available():
        return f"no NVIDIA GPU is visible; {INSTALL_HINT}"
    return None


def version(lib: Any) -> str:
    """The library's version string (the stand-in says it is one)."""
    return str(getattr(lib, "__version__", "unknown"))

"""Which vLLM a target drives: the real one (imported on first use only) or the CPU stand-in, and the vLLM
family of targets (:data:`FAMILY`: the registry, the library's load, version and requirement).

Both are reached through the same small interface (:mod:`graphsafe.vllm.real` for vLLM,
:mod:`graphsafe.vllm.standin` for the stand-in): the classes a model runner hands to a backend
(``CommonAttentionMetadata``, the KV-cache specs, ``VllmConfig``) and a lookup of backend classes.
"""

from __future__ import annotations

from typing import Any

from ..family import Family

__all__ = ["FAMILY", "load", "requirement", "version", "INSTALL_HINT", "ENVIRONMENT"]

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

#: the vLLM targets: vLLM's backends as shipped, then the deliberate mistakes in vLLM's classes
FAMILY = Family(
    prefix="vllm",
    package="graphsafe.vllm",
    targets={
        "vllm:TRITON_ATTN": "targets:TritonAttention",
        "vllm:TRITON_MLA": "targets:TritonMLA",
        "vllm:FLEX_ATTENTION": "targets:FlexAttention",
        "vllm:TRITON_ATTN:stale_pad_slots": "variants:TritonAttentionStalePadSlots",
        "vllm:TRITON_ATTN:decode_shortcut": "variants:TritonAttentionDecodeShortcut",
        "vllm:TRITON_ATTN:fresh_seq_lens": "variants:TritonAttentionFreshSeqLens",
        "vllm:TRITON_MLA:fresh_decode_metadata": "variants:TritonMLAFreshDecodeMetadata",
        "vllm:TRITON_MLA:lazy_row_plan": "variants:TritonMLALazyRowPlan",
        "vllm:FLEX_ATTENTION:fresh_block_mask": "variants:FlexAttentionFreshBlockMask",
    },
    safe=("vllm:TRITON_ATTN", "vllm:TRITON_MLA", "vllm:FLEX_ATTENTION"),
    library="vllm",
    imports="vllm.config",  # (most of vLLM's import time)
    interface="real",
    environment=ENVIRONMENT,
    install_hint=INSTALL_HINT,
    prefixes=("vllm", "vllm-mla"),
    by_reference="backends:parse",
    preload=("graphsafe.vllm.preload",),
    capture="worst",  # vLLM's runner captures every FULL graph on a dummy batch whose token rows are all live
    also="any vLLM backend: vllm:<registry name or module:Class>, vllm-mla:<...> for an MLA backend's decode",
)


def load(library: Any) -> Any:
    """The interface for a target's ``library``: ``"vllm"`` (the real one), ``"standin"``
    (:mod:`graphsafe.vllm.standin`) or a module with the same functions."""
    return FAMILY.load(library)


def requirement(library: Any = "vllm") -> str | None:
    """None when targets of ``library`` can run here, else one line saying what is missing (vLLM's
    presence is looked up, not imported: importing it takes seconds)."""
    return FAMILY.requirement(library)


version = FAMILY.version

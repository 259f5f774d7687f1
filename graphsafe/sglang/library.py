"""Which SGLang a target drives: the real one (imported on first use only) or the CPU stand-in, and the SGLang
family of targets (:data:`FAMILY`).

Both are reached through the same small interface (:mod:`graphsafe.sglang.real` for SGLang,
:mod:`graphsafe.sglang.standin` for the stand-in): a model-runner stand-in with SGLang's request-to-token
table and KV pool, a decode ``ForwardBatch``, SGLang's replay view of it, the capture mode and forward
context, the attention layer, and a lookup of backend classes.
"""

from __future__ import annotations

from typing import Any

from ..family import Family

__all__ = ["FAMILY", "load", "requirement", "version", "INSTALL_HINT", "ENVIRONMENT"]

#: what an SGLang target needs, said wherever one cannot run
INSTALL_HINT = (
    "SGLang targets need SGLang (pip install 'graphsafe[sglang]', or the offline bundle of docs/how-to/sglang.md) and an "
    "NVIDIA GPU; without them, graphsafe.sglang.standin (library = 'standin') runs the same adapter on the "
    "CPU emulator"
)

#: set (when unset) before SGLang is imported: no downloads, quiet logs
ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "SGLANG_LOGGING_LEVEL": "WARNING",
}

#: the SGLang targets: SGLang's backends as shipped, then the deliberate mistakes in SGLang's classes
FAMILY = Family(
    prefix="sglang",
    package="graphsafe.sglang",
    targets={
        "sglang:triton": "targets:TritonAttention",
        "sglang:flashinfer": "targets:FlashInferAttention",
        "sglang:triton:replay_skips_update": "variants:TritonReplaySkipsUpdate",
        "sglang:triton:fresh_kv_indptr": "variants:TritonFreshKvIndptr",
        "sglang:triton:lazy_kv_indptr": "variants:TritonLazyKvIndptr",
        "sglang:triton:stale_pad_locs": "variants:TritonStalePadLocs",
        "sglang:triton:short_seq_shortcut": "variants:TritonShortSeqShortcut",
    },
    safe=("sglang:triton", "sglang:flashinfer"),
    library="sglang",
    imports="sglang.srt.model_executor.forward_batch_info",
    interface="real",
    environment=ENVIRONMENT,
    install_hint=INSTALL_HINT,
    by_reference="backends:parse",
    preload=("graphsafe.sglang.preload",),
    capture="minimal",  # SGLang's runner captures on one-token sequences (its seq-len fill value)
    also="any SGLang attention backend: sglang:<module:Class> (an AttentionBackend subclass)",
)


def load(library: Any) -> Any:
    """The interface for a target's ``library``: ``"sglang"`` (the real one), ``"standin"``
    (:mod:`graphsafe.sglang.standin`) or a module with the same functions."""
    return FAMILY.load(library)


def requirement(library: Any = "sglang") -> str | None:
    """None when targets of ``library`` can run here, else one line saying what is missing (SGLang's presence
    is looked up, not imported: importing it takes seconds)."""
    return FAMILY.requirement(library)


version = FAMILY.version

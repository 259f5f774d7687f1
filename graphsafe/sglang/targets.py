"""SGLang's own attention backends as graphsafe targets, driven as SGLang's decode CUDA-graph runner drives
them: ``sglang:triton`` (``TritonAttnBackend``: split-KV Triton decode, SGLang's KV write) and
``sglang:flashinfer`` (``FlashInferAttnBackend``: FlashInfer's decode wrappers in CUDA-graph mode)."""

from __future__ import annotations

from typing import ClassVar

from .adapter import SglangTarget

__all__ = ["TritonAttention", "FlashInferAttention"]


class TritonAttention(SglangTarget):
    """SGLang's TritonAttnBackend, as shipped: decode graphs, split-KV Triton decode attention."""

    name = "sglang:triton"
    backend = "triton"
    expected: ClassVar[str | None] = None


class FlashInferAttention(SglangTarget):
    """SGLang's FlashInferAttnBackend, as shipped: decode graphs, FlashInfer's decode wrappers."""

    name = "sglang:flashinfer"
    backend = "flashinfer"
    expected: ClassVar[str | None] = None

"""A CPU stand-in for the parts of vLLM graphsafe's vLLM adapter drives, in plain torch.

The same interface as :mod:`graphsafe.vllm.real` (``CommonAttentionMetadata``, ``AttentionCGSupport``, a
config with the fields builders read, KV-cache specs, a backend registry) and three backends shaped like
vLLM's, whose builders and impls the adapter and graphsafe's deliberate mistakes (their mixins) drive the
way they drive vLLM's:

* ``TRITON_ATTN`` (:mod:`.attention`): ``ALWAYS``; metadata over the runner's buffers; paged attention;
* ``FLEX_ATTENTION`` (:mod:`.attention`): ``ALWAYS``; copies the batch into persistent buffers it
  allocates on first use (``persistent_kv_indices``), and returns two fresh tensors every build that its
  attention never reads;
* ``TRITON_MLA`` (:mod:`.mla`): ``UNIFORM_BATCH`` (as vLLM's is since it took speculative decoding),
  decode through ``forward_mqa``.

It lets the adapter, its targets and their buggy variants run under the CPU emulator in CI; it proves
nothing about vLLM itself, whose runs are the GPU campaign (``benchmarks/vllm_campaign.py``).

Example::

    from graphsafe.vllm import standin
    standin.backend_class("TRITON_ATTN").get_builder_cls()
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

import torch

from ...errors import ContractError

__version__ = "graphsafe-standin"
__all__ = [
    "__version__",
    "CommonAttentionMetadata",
    "AttentionCGSupport",
    "StandinBuilder",
    "backend_class",
    "make_config",
    "using",
    "kv_spec",
    "write_flash_cache",
]


class AttentionCGSupport(enum.Enum):
    """vLLM's levels (the same values as graphsafe's :class:`~graphsafe.Support`)."""

    ALWAYS = 3
    UNIFORM_BATCH = 2
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    NEVER = 0


@dataclass
class CommonAttentionMetadata:
    """vLLM's per-step metadata, the fields the stand-in's builders read."""

    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    seq_lens: torch.Tensor
    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    block_table_tensor: torch.Tensor
    slot_mapping: torch.Tensor
    causal: bool = True
    seq_lens_cpu_upper_bound: torch.Tensor | None = None


@dataclass
class KVSpec:
    """A layer's KV-cache spec (vLLM's ``FullAttentionSpec`` / ``MLAAttentionSpec``)."""

    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    mla: bool = False


@dataclass
class ModelConfig:
    """The model dimensions, read from a Hugging Face ``config.json`` as vLLM's ``ModelConfig`` does."""

    hf_text_config: Any
    max_model_len: int
    dtype: torch.dtype
    use_mla: bool = False

    def get_num_attention_heads(self, parallel_config: Any = None) -> int:
        return self.hf_text_config.num_attention_heads

    def get_num_kv_heads(self, parallel_config: Any = None) -> int:
        return 1 if self.use_mla else self.hf_text_config.num_key_value_heads

    def get_head_size(self) -> int:
        t = self.hf_text_config
        return t.kv_lora_rank + t.qk_rope_head_dim if self.use_mla else t.head_dim


@dataclass
class VllmConfig:
    """The parts of ``VllmConfig`` builders read."""

    model_config: ModelConfig
    scheduler_config: Any
    cache_config: Any
    speculative_config: Any = None
    parallel_config: Any = field(default_factory=SimpleNamespace)
    compilation_config: Any = field(default_factory=lambda: SimpleNamespace(static_forward_context={}))


def make_config(
    model: str,
    *,
    dtype: torch.dtype,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int,
    num_blocks: int,
    capture_sizes: tuple[int, ...],
    speculative_tokens: int,
    device: torch.device,
) -> VllmConfig:
    """The stand-in's config (the arguments of :func:`graphsafe.vllm.real.make_config`)."""
    with open(os.path.join(model, "config.json"), encoding="utf-8") as fh:
        hf = SimpleNamespace(**json.load(fh))
    mla = hasattr(hf, "kv_lora_rank")
    return VllmConfig(
        model_config=ModelConfig(hf, max_model_len, dtype, mla),
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens),
        cache_config=SimpleNamespace(block_size=block_size, num_gpu_blocks=num_blocks),
        speculative_config=SimpleNamespace(num_speculative_tokens=speculative_tokens) if speculative_tokens else None,
        compilation_config=SimpleNamespace(static_forward_context={}, cudagraph_capture_sizes=sorted(capture_sizes)),
    )


@contextlib.contextmanager
def using(config: Any) -> Iterator[None]:
    """(vLLM's ``set_current_vllm_config``: the stand-in reads no global config)"""
    yield


def kv_spec(*, mla: bool, block_size: int, num_kv_heads: int, head_size: int, dtype: torch.dtype) -> KVSpec:
    return KVSpec(block_size, num_kv_heads, head_size, dtype, mla)


def write_flash_cache(key, value, key_cache, value_cache, slot_mapping, layer) -> None:
    """The new keys and values into ``(blocks, block_size, kv_heads, head_size)`` caches; slot -1 is skipped."""
    from .attention import write_paged  # (the kernels module imports this one)

    write_paged(key, value, key_cache, value_cache, slot_mapping)


class StandinBuilder:
    """vLLM's metadata builder interface, what every stand-in builder shares: the constructor's arguments kept,
    the class's CUDA-graph support, and a capture build that is an ordinary build."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.ALWAYS

    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: torch.device):
        self.kv_cache_spec, self.layer_names, self.vllm_config, self.device = (
            kv_cache_spec,
            layer_names,
            vllm_config,
            device,
        )

    @classmethod
    def get_cudagraph_support(cls, vllm_config: Any, kv_cache_spec: Any) -> AttentionCGSupport:
        return cls._cudagraph_support

    def build_for_cudagraph_capture(self, common_attn_metadata: Any) -> Any:
        return self.build(0, common_attn_metadata)

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
        raise NotImplementedError


class StandinBackend:
    """vLLM's ``AttentionBackend`` interface from four class attributes (the stand-in's backends differ in
    nothing else)."""

    NAME: ClassVar[str]
    BUILDER: ClassVar[type]
    IMPL: ClassVar[type]
    MLA: ClassVar[bool] = False

    @classmethod
    def get_name(cls) -> str:
        return cls.NAME

    @classmethod
    def get_builder_cls(cls) -> type:
        return cls.BUILDER

    @classmethod
    def get_impl_cls(cls) -> type:
        return cls.IMPL

    @classmethod
    def is_mla(cls) -> bool:
        return cls.MLA


_BACKENDS = {
    "TRITON_ATTN": (".attention", "StandinAttentionBackend"),
    "FLEX_ATTENTION": (".attention", "StandinFlexBackend"),
    "TRITON_MLA": (".mla", "StandinMLABackend"),
}


def backend_class(ref: Any) -> type:
    """A stand-in backend class by name, or ``ref`` itself when it is a class."""
    if isinstance(ref, type):
        return ref
    try:
        module, name = _BACKENDS[ref]
    except (KeyError, TypeError):
        raise ContractError(f"the vLLM stand-in has no backend {ref!r}; it has {', '.join(_BACKENDS)}") from None
    return getattr(importlib.import_module(module, __name__), name)

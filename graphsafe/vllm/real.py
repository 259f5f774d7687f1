"""The interface graphsafe's vLLM adapter uses, on the real vLLM (imported when this module is).

Everything release-specific is looked up in what vLLM's classes expose (dataclass fields, the backend
registry), not in a version number: ``CommonAttentionMetadata`` gained and lost fields, the KV-cache
specs changed, and a builder's CUDA-graph support level moved between releases.  The model config is a
Hugging Face ``config.json`` only (no weights, no tokenizer); graphsafe ships two tiny ones.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterator
from typing import Any

import torch
import vllm
from vllm.config import (
    CacheConfig,
    CompilationConfig,
    DeviceConfig,
    LoadConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
    set_current_vllm_config,
)
from vllm.v1 import kv_cache_interface
from vllm.v1.attention.backend import AttentionCGSupport, CommonAttentionMetadata

from ..errors import ContractError
from .signatures import kwargs_for

__all__ = [
    "__version__",
    "CommonAttentionMetadata",
    "AttentionCGSupport",
    "backend_class",
    "make_config",
    "using",
    "kv_spec",
    "write_flash_cache",
]

__version__ = str(vllm.__version__)


def backend_class(ref: Any) -> type:
    """An attention backend class from a class, ``"module:Class"`` or a name of vLLM's backend registry
    (``"TRITON_ATTN"``)."""
    if isinstance(ref, type):
        return ref
    if not isinstance(ref, str) or not ref:
        raise ContractError(f"a vLLM backend must be a class, 'module:Class' or a registry name, got {ref!r}")
    if ":" in ref:
        module, _, name = ref.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in name.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise ContractError(f"vLLM backend {ref!r} does not import: {type(e).__name__}: {e}") from None
        return obj
    from vllm.v1.attention.backends.registry import AttentionBackendEnum  # only for registry names

    try:
        return AttentionBackendEnum[ref].get_class()
    except KeyError:
        known = ", ".join(m.name for m in AttentionBackendEnum)
        raise ContractError(f"vLLM {__version__} has no attention backend {ref!r}; its registry: {known}") from None


@functools.lru_cache(maxsize=8)
def _model_config(model: str, dtype: torch.dtype, max_model_len: int) -> ModelConfig:
    return ModelConfig(
        model=model,
        tokenizer=model,
        skip_tokenizer_init=True,
        trust_remote_code=False,
        dtype=str(dtype).removeprefix("torch."),
        seed=0,
        max_model_len=max_model_len,
    )


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
    """A ``VllmConfig`` as a model runner's would be for these sizes: FULL CUDA graphs at
    ``capture_sizes`` (tokens), ``num_blocks`` KV blocks of ``block_size``, and, with
    ``speculative_tokens``, n-gram speculative decoding (no draft model) proposing that many tokens."""
    mc = _model_config(model, dtype, max_model_len)
    cache = CacheConfig(**kwargs_for(CacheConfig, block_size=block_size, cache_dtype="auto"))
    cache.num_gpu_blocks, cache.num_cpu_blocks = num_blocks, 0
    sched = SchedulerConfig(
        **kwargs_for(
            SchedulerConfig,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len,
            is_encoder_decoder=False,
        )
    )
    spec_config = None
    if speculative_tokens:
        spec_config = SpeculativeConfig(
            method="ngram", num_speculative_tokens=speculative_tokens, prompt_lookup_max=2, prompt_lookup_min=1
        )
    comp = CompilationConfig(cudagraph_mode="FULL_AND_PIECEWISE", cudagraph_capture_sizes=sorted(capture_sizes))
    return VllmConfig(
        model_config=mc,
        cache_config=cache,
        parallel_config=ParallelConfig(),
        scheduler_config=sched,
        device_config=DeviceConfig(device=device.type),
        load_config=LoadConfig(),
        compilation_config=comp,
        speculative_config=spec_config,
    )


@contextlib.contextmanager
def using(config: Any) -> Iterator[None]:
    """vLLM's current config while ``config``'s builder and impl are made (they read it)."""
    with set_current_vllm_config(config):
        yield


def kv_spec(*, mla: bool, block_size: int, num_kv_heads: int, head_size: int, dtype: torch.dtype) -> Any:
    """The layer's KV-cache spec: ``MLAAttentionSpec`` or ``FullAttentionSpec``, with the fields this
    release has."""
    cls = kv_cache_interface.MLAAttentionSpec if mla else kv_cache_interface.FullAttentionSpec
    given = dict(block_size=block_size, num_kv_heads=num_kv_heads, head_size=head_size, dtype=dtype)
    if mla:
        given["cache_dtype_str"] = "auto"
    return cls(**kwargs_for(cls, **given))


def write_flash_cache(key, value, key_cache, value_cache, slot_mapping, layer) -> None:
    """vLLM's Triton cache write (``triton_reshape_and_cache_flash``): slot -1 is skipped."""
    # imported on use: only backends whose own cache write is a compiled op need it
    from vllm.v1.attention.ops.triton_reshape_and_cache_flash import triton_reshape_and_cache_flash

    triton_reshape_and_cache_flash(
        key, value, key_cache, value_cache, slot_mapping, "auto", layer._k_scale, layer._v_scale
    )

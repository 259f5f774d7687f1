"""A CPU stand-in for the parts of SGLang graphsafe's SGLang adapter drives, in plain torch.

The same interface as :mod:`graphsafe.sglang.real` (``make_runner``, ``decode_batch``, ``replay_view``,
``capture_mode``, ``forward_context``, ``RadixAttention``, ``backend_class``) over stand-ins of SGLang's
``ForwardBatch``, ``ReqToTokenPool``, ``MHATokenToKVPool`` and ``RadixAttention``, and two backends shaped
like SGLang's (:mod:`.backends`): ``triton`` (split-KV decode over the request-to-token table, a CUDA-graph
path over persistent buffers and an eager path of its own) and ``flashinfer`` (the same, one split).

It lets the adapter, its targets and graphsafe's deliberate mistakes (mixins put in front of the backend)
run under the CPU emulator in CI; it proves nothing about SGLang itself, whose runs are the GPU campaign
(``benchmarks/sglang_campaign.py``).

Example::

    from graphsafe.sglang import standin
    standin.backend_class("triton").get_cuda_graph_seq_len_fill_value(None)   # 1
"""

from __future__ import annotations

import contextlib
import enum
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from ...errors import ContractError

__version__ = "graphsafe-standin"
__all__ = [
    "__version__",
    "ForwardMode",
    "ForwardBatch",
    "ReqToTokenPool",
    "MHATokenToKVPool",
    "RadixAttention",
    "make_runner",
    "decode_batch",
    "replay_view",
    "capture_mode",
    "forward_context",
    "backend_class",
]


class ForwardMode(enum.Enum):
    """SGLang's forward modes (the one graphsafe drives: ``DECODE``)."""

    EXTEND = 1
    DECODE = 2
    IDLE = 3

    def is_decode_or_idle(self) -> bool:
        return self in (ForwardMode.DECODE, ForwardMode.IDLE)


@dataclass
class ForwardBatch:
    """SGLang's ``ForwardBatch``, the fields the stand-in's backends read."""

    forward_mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    seq_lens_cpu: torch.Tensor
    out_cache_loc: torch.Tensor
    seq_lens_sum: int
    positions: torch.Tensor
    spec_info: Any = None
    encoder_lens: Any = None
    kv_loc_plan: Any = None


class ReqToTokenPool:
    """Each request's token slots: row 0 is the request padded rows point at."""

    def __init__(self, size: int, max_context_len: int, device: Any, **_: Any) -> None:
        self.size = size
        self.req_to_token = torch.zeros(size + 1, max_context_len, dtype=torch.int32, device=device)


class MHATokenToKVPool:
    """The paged KV cache: one key and one value buffer per layer, ``[size + page_size, heads, dim]`` (the
    first page holds slot 0, where padded rows write)."""

    def __init__(
        self, size: int, page_size: int, dtype: Any, head_num: int, head_dim: int, layer_num: int, device: Any, **_: Any
    ) -> None:
        rows = size + page_size
        self.k_buffer = [torch.zeros(rows, head_num, head_dim, dtype=dtype, device=device) for _ in range(layer_num)]
        self.v_buffer = [torch.zeros(rows, head_num, head_dim, dtype=dtype, device=device) for _ in range(layer_num)]
        self.page_size = page_size

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.k_buffer[layer_id]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.v_buffer[layer_id]

    def set_kv_buffer(
        self, layer: Any, loc: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, *_: Any, **__: Any
    ) -> None:
        self.k_buffer[layer.layer_id].index_copy_(0, loc.long(), cache_k.to(self.k_buffer[layer.layer_id].dtype))
        self.v_buffer[layer.layer_id].index_copy_(0, loc.long(), cache_v.to(self.v_buffer[layer.layer_id].dtype))


class RadixAttention(torch.nn.Module):
    """SGLang's attention layer: what a backend reads of it."""

    def __init__(
        self, num_heads: int, head_dim: int, scaling: float, num_kv_heads: int, layer_id: int, **_: Any
    ) -> None:
        super().__init__()
        self.tp_q_head_num, self.tp_k_head_num, self.tp_v_head_num = num_heads, num_kv_heads, num_kv_heads
        self.head_dim = self.qk_head_dim = self.v_head_dim = head_dim
        self.scaling, self.layer_id = scaling, layer_id
        self.k_scale = self.v_scale = None


def make_runner(backend: str, **dims: Any) -> Any:
    """The model-runner stand-in a backend is built with (the fields SGLang's backends read of it)."""
    device, dtype, page = dims["device"], dims["dtype"], dims["page_size"]
    runner = SimpleNamespace(
        device=device,
        dtype=dtype,
        kv_cache_dtype=dtype,
        page_size=page,
        attention_backend=backend,
        model_config=SimpleNamespace(
            num_attention_heads=dims["num_heads"],
            num_key_value_heads=dims["num_kv_heads"],
            head_dim=dims["head_dim"],
            context_len=dims["max_context_len"],
        ),
        req_to_token_pool=ReqToTokenPool(dims["max_reqs"], dims["max_context_len"], device),
        token_to_kv_pool=MHATokenToKVPool(
            dims["pool_size"], page, dtype, dims["num_kv_heads"], dims["head_dim"], 1, device
        ),
        max_kv_splits=8,
    )
    runner.close = lambda: None
    return runner


def decode_batch(runner: Any, fields: dict[str, Any], capture: bool) -> ForwardBatch:
    """A decode ``ForwardBatch`` over ``fields`` (tensors the caller owns), bound to the runner's KV index plan."""
    fb = ForwardBatch(forward_mode=ForwardMode.DECODE, **fields)
    fb.kv_loc_plan = runner.req_to_token_pool.req_to_token
    return fb


def replay_view(fb: ForwardBatch, buffers: Any, bs: int, raw_bs: int, fill: int) -> Any:
    """SGLang's replay view: the scheduler's batch over the runner's padded static buffers."""
    return SimpleNamespace(
        batch_size=bs,
        forward_mode=ForwardMode.DECODE,
        input_ids=buffers.input_ids[:bs],
        positions=buffers.positions[:bs],
        req_pool_indices=buffers.req_pool_indices[:bs],
        seq_lens=buffers.seq_lens[:bs],
        seq_lens_sum=fb.seq_lens_sum + (bs - raw_bs) * fill,
        seq_lens_cpu=buffers.seq_lens_cpu[:bs],
        num_padding=bs - raw_bs,
        encoder_lens=None,
        out_cache_loc=fb.out_cache_loc,
        kv_loc_plan=fb.kv_loc_plan,
        spec_info=None,
    )


@contextlib.contextmanager
def capture_mode() -> Iterator[None]:
    """SGLang's ``model_capture_mode()`` (nothing to switch in the stand-in)."""
    yield


@contextlib.contextmanager
def forward_context(backend: Any, fb: Any) -> Iterator[None]:
    """SGLang's forward context for one forward (nothing to set in the stand-in)."""
    yield


def backend_class(ref: Any) -> type[Any]:
    """``"triton"``, ``"flashinfer"``, a class or ``"module:Class"``."""
    if isinstance(ref, type):
        return ref
    from . import backends  # (imported on first lookup: a circular import at module level)

    known = {"triton": backends.TritonAttnBackend, "flashinfer": backends.FlashInferAttnBackend}
    if ref in known:
        return known[ref]
    module, sep, attr = str(ref).partition(":")
    if not sep:
        raise ContractError(f"the SGLang stand-in has no backend {ref!r}; it has {', '.join(known)}, or 'module:Class'")
    return getattr(importlib.import_module(module), attr)

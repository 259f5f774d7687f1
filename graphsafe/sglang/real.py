"""The interface graphsafe's SGLang adapter uses, over SGLang itself (imported when this module is).

Built against what SGLang's classes expose rather than a release: the decode CUDA-graph runner's protocol
(``init_cuda_graph_state``, ``get_cuda_graph_seq_len_fill_value``, ``init_forward_metadata_out_graph`` with
``in_capture``, ``init_forward_metadata_in_graph``, ``build_replay_fb_view``) appeared in SGLang in 2026 and
replaced ``init_forward_metadata_capture_cuda_graph`` / ``..._replay_cuda_graph``; a backend without it is
an error saying so.  The model-runner stand-in holds what SGLang's attention-backend test fixture gives a
backend (``MockModelRunner``): the model's head counts, a ``ReqToTokenPool``, an ``MHATokenToKVPool``, the
KV index translator, and server arguments set through SGLang's runtime context.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import sglang
from sglang.srt.configs.model_config import AttentionArch
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.model_executor.cuda_graph_config import Backend, CudaGraphConfig, PhaseConfig
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.forward_context import ForwardContext
from sglang.srt.model_executor.forward_context import forward_context as _forward_context
from sglang.srt.model_executor.runner.decode_cuda_graph_runner import build_replay_fb_view
from sglang.srt.model_executor.runner_utils.capture_mode import model_capture_mode
from sglang.srt.runtime_context import get_context, get_parallel
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from ..errors import ContractError

__version__ = str(getattr(sglang, "__version__", "unknown"))
__all__ = [
    "__version__",
    "RadixAttention",
    "make_runner",
    "decode_batch",
    "replay_view",
    "capture_mode",
    "forward_context",
    "backend_class",
]

#: the runner's protocol a backend must have (SGLang's decode CUDA-graph runner calls these)
PROTOCOL = ("init_cuda_graph_state", "get_cuda_graph_seq_len_fill_value", "init_forward_metadata_out_graph")

#: built-in backends by graphsafe's short name: (module, class)
BACKENDS = {
    "triton": ("sglang.srt.layers.attention.triton_backend", "TritonAttnBackend"),
    "flashinfer": ("sglang.srt.layers.attention.flashinfer_backend", "FlashInferAttnBackend"),
}

# one attention rank without torch.distributed, as SGLang's attention test fixture sets it (kept: undone when
# collected)
_SINGLE_RANK = get_parallel().override(attn_tp_size=1, attn_dcp_rank=0)
_SINGLE_RANK.__enter__()


class _ModelConfig:
    """The model config fields SGLang's attention backends read (a dense decoder, one layer's heads)."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int, context_len: int) -> None:
        self.attention_arch = AttentionArch.MHA
        self.context_len = context_len
        self.hidden_size = heads * head_dim
        self.num_attention_heads, self.num_key_value_heads = heads, kv_heads
        self.head_dim = self.v_head_dim = self.swa_v_head_dim = head_dim
        self.is_encoder_decoder = self.is_multimodal = self.model_is_mrope = False
        self.is_generation = True
        self.quantization = None
        self.is_hybrid_swa = self.is_local_attention_model = False
        self.attention_chunk_size = self.sliding_window_size = None
        self.linear_attn_registry_result = None
        hf = SimpleNamespace(
            architectures=["LlamaForCausalLM"],
            hidden_size=heads * head_dim,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
        )
        hf.get_text_config = lambda: hf
        self.hf_config = self.hf_text_config = hf

    def get_num_attention_heads(self, tp_size: int) -> int:
        return self.num_attention_heads // tp_size

    def get_max_num_attention_heads(self) -> int:
        return self.num_attention_heads

    def get_num_kv_heads(self, tp_size: int, dcp_size: int = 1) -> int:
        return self.num_key_value_heads // (tp_size // dcp_size)


class _Runner:
    """The model-runner stand-in: what SGLang's attention-backend test fixture gives a backend."""

    def __init__(self, backend: str, dims: dict[str, Any]) -> None:
        dev, dt, page = dims["device"], dims["dtype"], dims["page_size"]
        self.device, self.dtype, self.kv_cache_dtype, self.kv_cache_dtype_str = str(dev), dt, dt, "auto"
        self.prefill_attention_backend_str = self.decode_attention_backend_str = backend
        self.draft_attention_backend = None
        self.gpu_id = dev.index or 0
        self.canary_manager = None
        self.page_size = page
        self.model_config = _ModelConfig(
            dims["num_heads"], dims["num_kv_heads"], dims["head_dim"], dims["max_context_len"]
        )
        self.is_draft_worker = False
        self.max_running_requests = dims["max_reqs"]
        self.model = None
        self.spec_algorithm = SpeculativeAlgorithm.NONE
        self._kernel_warmed_up = True
        self.attention_chunk_size = self.hisparse_coordinator = self.sliding_window_size = None
        self.init_new_workspace = self.is_hybrid_swa = self.use_mla_backend = False
        self.hybrid_gdn_config = self.hybrid_lightning_config = self.kimi_linear_config = None
        self.linear_attn_model_spec = self.mamba2_config = self.mambaish_config = None
        self._override = get_context().override_server_args(
            attention_backend=backend,
            chunked_prefill_size=-1,
            cuda_graph_config=CudaGraphConfig(
                decode=PhaseConfig(backend=Backend.FULL), prefill=PhaseConfig(backend=Backend.DISABLED)
            ),
            disable_radix_cache=False,
            dllm_algorithm=None,
            dllm_algorithm_config=None,
            dp_size=1,
            enable_deterministic_inference=False,
            enable_mis=False,
            is_embedding=False,
            kv_cache_dtype="auto",
            max_running_requests=None,
            pp_size=1,
            revision=None,
            speculative_algorithm=None,
            speculative_eagle_topk=0,
            speculative_num_draft_tokens=0,
            speculative_num_steps=0,
            tp_size=1,
            triton_attention_num_kv_splits=8,
            triton_attention_split_tile_size=None,
        )
        self.server_args = self._override.install()
        self.req_to_token_pool = ReqToTokenPool(
            size=dims["max_reqs"], max_context_len=dims["max_context_len"], device=str(dev), enable_memory_saver=False
        )
        self.token_to_kv_pool = MHATokenToKVPool(
            size=dims["pool_size"],
            page_size=page,
            dtype=dt,
            head_num=dims["num_kv_heads"],
            head_dim=dims["head_dim"],
            layer_num=1,
            device=str(dev),
            enable_memory_saver=False,
            enable_alt_stream=False,
        )
        self.token_to_kv_pool_allocator = SimpleNamespace(page_size=page, get_kvcache=lambda: self.token_to_kv_pool)
        self.kv_index_translator = KVIndexTranslator(
            req_to_token=self.req_to_token_pool.req_to_token,
            token_to_kv_pool_allocator=self.token_to_kv_pool_allocator,
            token_to_kv_pool=self.token_to_kv_pool,
            page_size=page,
            device=str(dev),
            is_draft_worker=False,
        )

    def decode_num_tokens_per_req(self, *, num_draft_tokens: Any = None) -> int:
        return 1  # no speculative decoding

    def close(self) -> None:
        self._override.restore()


def make_runner(backend: str, **dims: Any) -> Any:
    """The model-runner stand-in for ``backend`` (``"triton"``, ``"flashinfer"``; its server arguments)."""
    return _Runner(backend, dims)


def decode_batch(runner: Any, fields: dict[str, Any], capture: bool) -> Any:
    """A decode ``ForwardBatch``: a capture batch over the runner's static buffers (bound to the runner's
    slots) or a scheduler's batch (bound to its own KV index plan)."""
    extra = {"orig_seq_lens": fields["seq_lens"], "can_run_decode_cuda_graph": True} if capture else {}
    fb = ForwardBatch(forward_mode=ForwardMode.DECODE, spec_algorithm=SpeculativeAlgorithm.NONE, **fields, **extra)
    if capture:
        runner.kv_index_translator.bind_runner_slots(fb)
    else:
        runner.kv_index_translator.bind_own_plan(fb)
    return fb


def replay_view(fb: Any, buffers: Any, bs: int, raw_bs: int, fill: int) -> Any:
    """SGLang's replay view: the scheduler's batch over the runner's padded static buffers."""
    return build_replay_fb_view(
        forward_batch=fb,
        buffers=buffers,
        bs=bs,
        raw_bs=raw_bs,
        num_tokens=bs,
        global_num_tokens_cpu=None,
        seq_len_fill_value=fill,
        capture_forward_mode=ForwardMode.DECODE,
        is_encoder_decoder=False,
    )


def capture_mode() -> Any:
    """SGLang's ``model_capture_mode()``: the runner's warm-ups and capture run inside it."""
    return model_capture_mode()


@contextlib.contextmanager
def forward_context(backend: Any, fb: Any) -> Iterator[None]:
    """SGLang's forward context for one forward of ``backend``."""
    with _forward_context(ForwardContext(attn_backend=backend), forward_batch=fb):
        yield


def backend_class(ref: Any) -> type[Any]:
    """``"triton"``, ``"flashinfer"``, an ``AttentionBackend`` class or ``"module:Class"``; it must have the
    decode CUDA-graph runner's protocol (:data:`PROTOCOL`)."""
    if isinstance(ref, type):
        cls = ref
    else:
        module, attr = BACKENDS.get(ref) or str(ref).partition(":")[::2]
        if not module or not attr:
            raise ContractError(f"SGLang backend {ref!r}: name {', '.join(BACKENDS)} or 'module:Class'")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ContractError(f"SGLang backend {ref!r} does not import: {type(e).__name__}: {e}") from None
    missing = [m for m in PROTOCOL if not callable(getattr(cls, m, None))]
    if missing:
        raise ContractError(
            f"{cls.__qualname__} lacks {', '.join(missing)}: graphsafe drives SGLang's decode CUDA-graph runner "
            "protocol (SGLang releases of 2026 on); an older backend's init_forward_metadata_capture_cuda_graph "
            "is not supported"
        )
    return cls

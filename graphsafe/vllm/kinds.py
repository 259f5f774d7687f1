"""What a backend's impl is given, by kind: standard attention (query, key, value and a paged K/V cache)
and MLA (a latent cache, decode through ``forward_mqa``).

* :class:`AttentionTarget`: the KV cache is vLLM's logical ``(blocks, kv_heads, block_size, 2 * head_size)``
  over an NHD buffer (the layout vLLM gives TRITON_ATTN and FLEX_ATTENTION); ``forward()`` writes the new
  keys and values (``cache_write``: the impl's ``do_kv_cache_update``, or vLLM's Triton cache write for a
  backend whose own is a compiled op) with the slot mapping the builder put in the metadata, then calls
  ``impl.forward(layer, q, k, v, kv_cache, metadata, output=...)``.
* :class:`MLATarget`: the cache is ``(blocks, block_size, kv_lora_rank + rope)``; ``forward()`` writes the
  new latent rows (with torch: vLLM's ``concat_and_cache_mla`` is a compiled op; slot -1 writes a trash row
  past the cache) and calls ``impl.forward_mqa(q, kv_cache, metadata, layer)``, vLLM's MLA decode.  MLA
  graphs serve decode batches only (``UNIFORM_SINGLE_TOKEN_DECODE``, or ``UNIFORM_BATCH`` with speculative
  tokens: the spec's ``uniform_query_len``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..contract import Batch, CaptureSpec
from .adapter import VllmTarget

__all__ = ["AttentionTarget", "MLATarget", "NoPrefill"]


class AttentionTarget(VllmTarget):
    """A standard (query, key, value) vLLM backend: see the module docstring."""

    #: ``"impl"`` (``impl.do_kv_cache_update``) or ``"triton"`` (vLLM's ``triton_reshape_and_cache_flash``)
    cache_write: ClassVar[str] = "impl"

    def make_impl(self) -> Any:
        d = self.dims(self.config)
        return self.impl_cls(self.vl)(
            num_heads=d["num_heads"],
            head_size=d["head_size"],
            scale=d["head_size"] ** -0.5,
            num_kv_heads=d["num_kv_heads"],
            alibi_slopes=None,
            sliding_window=None,
            kv_cache_dtype="auto",
        )

    def make_tensors(self, spec: CaptureSpec) -> None:
        d = self.dims(self.config)
        h, hk, hs, rows = d["num_heads"], d["num_kv_heads"], d["head_size"], self.max_rows
        dt, dev = self.dtype, self.device
        # physical (blocks, block_size, kv_heads, 2 * head_size): NHD
        self.kv_store = torch.zeros(spec.num_blocks, spec.block_size, hk, 2 * hs, dtype=dt, device=dev)
        self.kv_cache = self.kv_store.transpose(1, 2)  # logical (blocks, kv_heads, block_size, 2 * head_size)
        self.q = torch.zeros(rows, h, hs, dtype=dt, device=dev)
        self.k = torch.zeros(rows, hk, hs, dtype=dt, device=dev)
        self.v = torch.zeros(rows, hk, hs, dtype=dt, device=dev)
        self.out = torch.zeros(rows, h, hs, dtype=dt, device=dev)

    def token_inputs(self) -> dict[str, torch.Tensor]:
        return {"q": self.q, "k": self.k, "v": self.v}

    def static(self) -> dict[str, torch.Tensor]:
        return {"kv_cache": self.kv_store}

    def write_cache(self, rows: int) -> None:
        slots = self.metadata.slot_mapping
        if self.cache_write == "triton":
            key_cache, value_cache = self.kv_cache.transpose(1, 2).split(self.k.shape[-1], dim=-1)
            self.vl.write_flash_cache(self.k[:rows], self.v[:rows], key_cache, value_cache, slots, self.layer)
        else:
            self.impl.do_kv_cache_update(self.layer, self.k[:rows], self.v[:rows], self.kv_cache, slots)

    def attend(self, rows: int) -> torch.Tensor:
        self.impl.forward(
            self.layer,
            self.q[:rows],
            self.k[:rows],
            self.v[:rows],
            self.kv_cache,
            self.metadata,
            output=self.out[:rows],
        )
        return self.out


class NoPrefill:
    """The MLA layer's prefill backend, which builders clone: graphsafe drives MLA decode only."""

    def clone(self) -> NoPrefill:
        return self

    @staticmethod
    def get_name() -> str:
        return "graphsafe-decode-only"

    def prepare_metadata(self, metadata: Any) -> None:
        raise RuntimeError("graphsafe drives vLLM's MLA decode path only; this batch was split into a prefill")


class MLATarget(VllmTarget):
    """A vLLM MLA backend's decode (``forward_mqa``): see the module docstring."""

    mla = True
    model_kind = "deepseek_v3"
    default_spec = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=128, block_size=16, uniform_query_len=2)

    def mla_dims(self) -> dict[str, Any]:
        t = self.config.model_config.hf_text_config
        return {
            "q_lora_rank": getattr(t, "q_lora_rank", None),
            "kv_lora_rank": t.kv_lora_rank,
            "qk_nope_head_dim": t.qk_nope_head_dim,
            "qk_rope_head_dim": t.qk_rope_head_dim,
            "v_head_dim": t.v_head_dim,
        }

    def make_layer(self) -> torch.nn.Module:
        layer = super().make_layer()
        # (setattr: torch types a module's attributes as tensors and modules; these are plain values)
        for k, v in {**self.mla_dims(), "prefill_backend": NoPrefill()}.items():
            setattr(layer, k, v)
        return layer

    def make_impl(self) -> Any:
        m, d = self.mla_dims(), self.dims(self.config)
        impl = self.impl_cls(self.vl)(
            num_heads=d["num_heads"],
            head_size=m["kv_lora_rank"] + m["qk_rope_head_dim"],
            scale=(m["qk_nope_head_dim"] + m["qk_rope_head_dim"]) ** -0.5,
            num_kv_heads=1,
            alibi_slopes=None,
            sliding_window=None,
            kv_cache_dtype="auto",
            logits_soft_cap=None,
            attn_type="decoder",
            kv_sharing_target_layer_name=None,
            qk_head_dim=m["qk_nope_head_dim"] + m["qk_rope_head_dim"],
            kv_b_proj=torch.nn.Identity(),
            **m,
        )
        if getattr(impl, "dcp_world_size", 1) in (-1, None):  # no distributed group: one rank
            impl.dcp_world_size = 1
        return impl

    def make_tensors(self, spec: CaptureSpec) -> None:
        m, d = self.mla_dims(), self.dims(self.config)
        lat, rope, rows = m["kv_lora_rank"], m["qk_rope_head_dim"], self.max_rows
        dt, dev = self.dtype, self.device
        slots = spec.num_blocks * spec.block_size
        self.kv_store = torch.zeros(slots + 1, lat + rope, dtype=dt, device=dev)  # + a trash row
        self.kv_cache = self.kv_store[:-1].view(spec.num_blocks, spec.block_size, lat + rope)
        self.q = torch.zeros(rows, d["num_heads"], lat + rope, dtype=dt, device=dev)
        self.kv_c = torch.zeros(rows, lat, dtype=dt, device=dev)
        self.k_pe = torch.zeros(rows, rope, dtype=dt, device=dev)

    def token_inputs(self) -> dict[str, torch.Tensor]:
        return {"q": self.q, "kv_c": self.kv_c, "k_pe": self.k_pe}

    def static(self) -> dict[str, torch.Tensor]:
        return {"kv_cache": self.kv_cache}

    def write_cache(self, rows: int) -> None:
        slots = self.metadata.slot_mapping[:rows]
        trash = self.kv_store.shape[0] - 1
        idx = torch.where(slots < 0, torch.full_like(slots, trash), slots)
        self.kv_store.index_copy_(0, idx, torch.cat([self.kv_c[:rows], self.k_pe[:rows]], dim=-1))

    def attend(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = self.impl.forward_mqa(self.q[:rows], self.kv_cache, self.metadata, self.layer)
        return out, lse

    def live(self, outputs, batch: Batch):
        out, lse = outputs
        return out[: batch.num_tokens], lse[: batch.num_tokens]

"""The stand-in's ``TRITON_MLA``: vLLM's MLA decode (``forward_mqa``) over a latent cache, in plain torch.

The builder splits nothing (graphsafe's MLA batches are decodes: one query length, ``1 + speculative
tokens``) and hands ``_build_decode`` the block table and sequence lengths, as vLLM's MLA builder does;
``forward_mqa`` flattens each request's query rows to decode rows with their own causal extent, as vLLM's
TRITON_MLA does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from . import AttentionCGSupport, StandinBackend, StandinBuilder

__all__ = ["StandinMLABackend", "MLAMetadata", "DecodeMetadata"]


@dataclass
class DecodeMetadata:
    block_table: torch.Tensor
    seq_lens: torch.Tensor


@dataclass
class MLAMetadata:
    num_reqs: int
    max_query_len: int
    max_seq_len: int
    num_actual_tokens: int
    query_start_loc: torch.Tensor
    slot_mapping: torch.Tensor
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    causal: bool = True
    decode: DecodeMetadata | None = None


class MLABuilder(StandinBuilder):
    """vLLM's MLA metadata builder, decode only."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH

    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: torch.device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        spec = vllm_config.speculative_config
        self.reorder_batch_threshold = 1 + (spec.num_speculative_tokens if spec is not None else 0)

    def _build_decode(self, block_table_tensor, seq_lens_device, *args: Any, **kwargs: Any) -> DecodeMetadata:
        return DecodeMetadata(block_table=block_table_tensor, seq_lens=seq_lens_device)

    def build_for_cudagraph_capture(self, common_attn_metadata: Any) -> MLAMetadata:
        assert common_attn_metadata.max_query_len <= self.reorder_batch_threshold  # decode only
        return self.build(0, common_attn_metadata)

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> MLAMetadata:
        m = common_attn_metadata
        if m.max_query_len > self.reorder_batch_threshold:
            raise RuntimeError(f"the MLA stand-in decodes only; a query of {m.max_query_len} tokens is a prefill")
        decode = self._build_decode(
            m.block_table_tensor,
            m.seq_lens,
            m.max_seq_len,
            m.query_start_loc_cpu,
            m.query_start_loc,
            m.num_actual_tokens,
            m.max_query_len,
            None,
        )
        return MLAMetadata(
            num_reqs=m.num_reqs,
            max_query_len=m.max_query_len,
            max_seq_len=m.max_seq_len,
            num_actual_tokens=m.num_actual_tokens,
            query_start_loc=m.query_start_loc,
            slot_mapping=m.slot_mapping,
            num_decodes=m.num_reqs,
            num_decode_tokens=m.num_actual_tokens,
            num_prefills=0,
            decode=decode,
        )


class MLAImpl:
    """vLLM's MLA impl interface: ``forward_mqa`` (decode)."""

    def __init__(self, num_heads, head_size, scale, num_kv_heads, *args: Any, kv_lora_rank: int, **kwargs: Any):
        self.num_heads, self.head_size, self.scale, self.kv_lora_rank = num_heads, head_size, float(scale), kv_lora_rank

    def row_extents(self, attn_metadata: MLAMetadata, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each decode row's block-table row and causal key count (vLLM flattens a request's query so)."""
        decode = attn_metadata.decode
        if decode is None:  # (the builder gives every batch one: it builds decodes only)
            raise RuntimeError("the MLA stand-in decodes only; this metadata has no decode part")
        table, lens = decode.block_table, decode.seq_lens
        q = rows // lens.shape[0]
        owner = torch.arange(rows, device=lens.device) // q
        offset = torch.arange(rows, device=lens.device) % q - (q - 1)
        return table[owner], (lens[owner] + offset).clamp(min=0)

    def forward_mqa(self, q, kv_c_and_k_pe_cache, attn_metadata, layer) -> tuple[torch.Tensor, torch.Tensor]:
        rows, heads, _ = q.shape
        table, lens = self.row_extents(attn_metadata, rows)
        bs = kv_c_and_k_pe_cache.shape[1]
        width = table.shape[1] * bs
        pos = torch.arange(width, device=q.device)
        phys = table[:, pos // bs].long() * bs + pos % bs
        kv = kv_c_and_k_pe_cache.reshape(-1, kv_c_and_k_pe_cache.shape[-1])[phys].float()  # [rows, width, L + R]
        s = torch.einsum("rhd,rwd->rhw", q.float(), kv) * self.scale
        s = s.masked_fill(~(pos[None, :] < lens[:, None])[:, None, :], float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        out = torch.einsum("rhw,rwd->rhd", p, kv[..., : self.kv_lora_rank])
        return out.to(q.dtype), lse.nan_to_num(0.0, neginf=0.0).to(q.dtype)


class StandinMLABackend(StandinBackend):
    """The stand-in's ``TRITON_MLA``."""

    NAME, BUILDER, IMPL, MLA = "TRITON_MLA", MLABuilder, MLAImpl, True

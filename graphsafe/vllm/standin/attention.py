"""The stand-in's standard attention backends: ``TRITON_ATTN`` and ``FLEX_ATTENTION``, in plain torch.

Both attend with :func:`paged_attention`: every token row finds its request from the query start
locations on the device, and attends causally over its request's blocks, all on the device (no host
read, so a graph can hold it).  The KV cache is vLLM's logical ``(blocks, kv_heads, block_size,
2 * head_size)``.  The FLEX builder copies the step into persistent buffers, as vLLM's does, allocating
the block-index one on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import StandinBackend, StandinBuilder

__all__ = [
    "paged_attention",
    "write_paged",
    "StandinAttentionBackend",
    "StandinFlexBackend",
    "AttentionMetadata",
    "FlexMetadata",
]


def paged_attention(
    q, key_cache, value_cache, query_start_loc, seq_lens, block_table, scale, causal: bool = True
) -> torch.Tensor:
    """Attention of every row of ``q`` ([rows, heads, dim]) over its request's cached keys (causal: each query
    token sees the keys up to its own position; else all of its request's).

    ``key_cache``/``value_cache``: ``[blocks, block_size, kv_heads, dim]``.  Rows past the last request's
    queries, and requests of length 0, give zeros."""
    rows, heads, dim = q.shape
    bs, kv_heads = key_cache.shape[1], key_cache.shape[2]
    reqs = seq_lens.shape[0]
    r = torch.arange(rows, device=q.device, dtype=query_start_loc.dtype)
    req = torch.searchsorted(query_start_loc[1:].contiguous(), r, right=True)
    live = req < reqs
    req = req.clamp(max=reqs - 1)
    qlen = (query_start_loc[1:] - query_start_loc[:-1])[req]
    visible = seq_lens[req] - qlen + (r - query_start_loc[req]) + 1 if causal else seq_lens[req]  # keys row r sees
    visible = torch.where(live, visible, torch.zeros_like(visible))
    width = block_table.shape[1] * bs
    pos = torch.arange(width, device=q.device)
    phys = block_table[req][:, pos // bs].long() * bs + pos % bs  # [rows, width]
    k = key_cache.reshape(-1, kv_heads, dim)[phys].float()  # [rows, width, kv_heads, dim]
    v = value_cache.reshape(-1, kv_heads, dim)[phys].float()
    group = heads // kv_heads
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    s = torch.einsum("rhd,rwhd->rhw", q.float(), k) * scale
    mask = pos[None, :] < visible[:, None]  # [rows, width]
    s = s.masked_fill(~mask[:, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row with no key: zeros
    return torch.einsum("rhw,rwhd->rhd", p, v).to(q.dtype)


def write_paged(key, value, key_cache, value_cache, slot_mapping) -> None:
    """``key``/``value`` rows into the caches at ``slot_mapping`` (slot -1: not written)."""
    kf, vf = key_cache.reshape(-1, *key_cache.shape[2:]), value_cache.reshape(-1, *value_cache.shape[2:])
    n = slot_mapping.shape[0]
    skip = (slot_mapping < 0)[:, None, None]
    idx = slot_mapping.clamp(min=0)
    kf.index_copy_(0, idx, torch.where(skip, kf[idx], key[:n]))
    vf.index_copy_(0, idx, torch.where(skip, vf[idx], value[:n]))


@dataclass
class AttentionMetadata:
    """What the stand-in's TRITON_ATTN builds (vLLM's ``TritonAttentionMetadata``, its fields the impl reads)."""

    num_actual_tokens: int
    max_query_len: int
    query_start_loc: torch.Tensor
    max_seq_len: int
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    causal: bool = True


class AttentionBuilder(StandinBuilder):
    """vLLM's metadata builder interface; this one passes the runner's views through (support: ALWAYS)."""

    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: torch.device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> AttentionMetadata:
        m = common_attn_metadata
        return AttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            max_query_len=m.max_query_len,
            query_start_loc=m.query_start_loc,
            max_seq_len=m.max_seq_len,
            seq_lens=m.seq_lens,
            block_table=m.block_table_tensor,
            slot_mapping=m.slot_mapping,
            causal=m.causal,
        )


class AttentionImpl:
    """vLLM's attention impl interface: ``do_kv_cache_update`` and ``forward``."""

    def __init__(self, num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype, **kw):
        self.num_heads, self.head_size, self.scale, self.num_kv_heads = num_heads, head_size, float(scale), num_kv_heads

    def caches(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(key_cache, value_cache)``, each ``[blocks, block_size, kv_heads, head_size]``."""
        return kv_cache.transpose(1, 2).split(self.head_size, dim=-1)

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        write_paged(key, value, *self.caches(kv_cache), slot_mapping)

    def tables(self, md: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(query start locations, sequence lengths, block table) the attention reads."""
        return md.query_start_loc, md.seq_lens, md.block_table

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, **kw) -> torch.Tensor:
        n = attn_metadata.num_actual_tokens
        qsl, seq_lens, table = self.tables(attn_metadata)
        causal = bool(attn_metadata.causal)
        out = paged_attention(query[:n], *self.caches(kv_cache), qsl, seq_lens, table, self.scale, causal)
        output[:n].copy_(out)
        return output


class StandinAttentionBackend(StandinBackend):
    """The stand-in's ``TRITON_ATTN``."""

    NAME, BUILDER, IMPL = "TRITON_ATTN", AttentionBuilder, AttentionImpl


def copy_to_persistent(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``src`` into the leading part of ``dst`` (vLLM's helper of the same name); that part, returned."""
    n = src.shape[0]
    dst[:n].copy_(src)
    return dst[:n]


@dataclass(kw_only=True)
class FlexMetadata(AttentionMetadata):
    """What the stand-in's FLEX_ATTENTION builds: the fields the impl reads (persistent buffers), and two fresh
    host-side tensors."""

    num_blocks_per_seq: torch.Tensor  # fresh every build; the attention never reads it
    logical_block_ids: torch.Tensor  # fresh every build; the attention never reads it


class FlexBuilder(AttentionBuilder):
    """Copies the step into persistent buffers sized for the maximum (vLLM's FLEX_ATTENTION builder does)."""

    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: torch.device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        reqs = vllm_config.scheduler_config.max_num_seqs
        self.persistent_query_start_loc = torch.zeros(reqs + 1, dtype=torch.int32, device=device)
        self.persistent_seq_lens = torch.zeros(reqs, dtype=torch.int32, device=device)
        self.max_blocks = -(-vllm_config.model_config.max_model_len // self.block_size)
        self.persistent_kv_indices: torch.Tensor | None = None  # allocated on the first build

    def build(self, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> FlexMetadata:
        m = common_attn_metadata
        if self.persistent_kv_indices is None:
            reqs = self.vllm_config.scheduler_config.max_num_seqs
            self.persistent_kv_indices = torch.zeros(reqs, self.max_blocks, dtype=torch.int32, device=self.device)
        table = m.block_table_tensor[:, : self.max_blocks]
        return FlexMetadata(
            num_actual_tokens=m.num_actual_tokens,
            max_query_len=m.max_query_len,
            query_start_loc=copy_to_persistent(self.persistent_query_start_loc, m.query_start_loc),
            max_seq_len=m.max_seq_len,
            seq_lens=copy_to_persistent(self.persistent_seq_lens, m.seq_lens),
            block_table=copy_to_persistent(self.persistent_kv_indices, table),
            slot_mapping=m.slot_mapping,
            num_blocks_per_seq=(m.seq_lens + self.block_size - 1) // self.block_size,
            logical_block_ids=torch.arange(self.max_blocks, device=self.device),
        )


class StandinFlexBackend(StandinAttentionBackend):
    """The stand-in's ``FLEX_ATTENTION``."""

    NAME, BUILDER = "FLEX_ATTENTION", FlexBuilder

"""The stand-in's attention backends, shaped like SGLang's ``TritonAttnBackend`` and ``FlashInferAttnBackend``.

Both keep the attribute and method names graphsafe's adapter and mistakes use of SGLang's Triton backend:
``forward_metadata`` (``kv_indptr``, ``kv_indices``, ``num_kv_splits``, ``attn_logits``, ``attn_lse``), the
persistent ``kv_indptr`` and ``cuda_graph_*`` buffers, ``init_cuda_graph_state``,
``init_forward_metadata_out_graph`` (capture: metadata over the persistent buffers; replay: the buffers
refreshed, the metadata object reused), ``init_forward_metadata_in_graph`` (nothing), an eager
``init_forward_metadata`` of fresh tensors, and ``forward_decode`` (the new token's key and value written at
``out_cache_loc``, then split-KV decode attention over the request-to-token table, on the device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ForwardMetadata", "TritonAttnBackend", "FlashInferAttnBackend", "decode_attention"]


@dataclass
class ForwardMetadata:
    """What ``forward_decode`` reads: the split-KV scratch, the split counts and the KV index rails."""

    attn_logits: torch.Tensor
    attn_lse: torch.Tensor
    num_kv_splits: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    max_extend_len: Any = None
    swa_out_cache_loc: Any = None


def decode_attention(q, k_buffer, v_buffer, md: ForwardMetadata, scale: float, width: int) -> torch.Tensor:
    """Split-KV decode: row ``r`` of ``q`` ([rows, heads, dim]) attends over the key slots
    ``kv_indices[kv_indptr[r]:kv_indptr[r + 1]]``, cut into ``num_kv_splits[r]`` splits; each split's output
    and log-sum-exp go to the scratch (``attn_logits``, ``attn_lse``), then are merged."""
    rows, heads, dim = q.shape
    kv_heads, splits = k_buffer.shape[1], md.attn_logits.shape[2]
    pos = torch.arange(width, device=q.device)
    start = md.kv_indptr[:rows].long()
    lens = md.kv_indptr[1 : rows + 1].long() - start
    valid = pos[None, :] < lens[:, None]
    idx = (start[:, None] + pos[None, :]).clamp(max=md.kv_indices.numel() - 1)
    tok = torch.where(valid, md.kv_indices[idx].long(), torch.zeros_like(idx))
    group = heads // kv_heads
    k = k_buffer[tok].float().repeat_interleave(group, dim=2)  # [rows, width, heads, dim]
    v = v_buffer[tok].float().repeat_interleave(group, dim=2)
    s = torch.einsum("rhd,rwhd->rhw", q.float(), k) * scale
    n = md.num_kv_splits[:rows].long().clamp(1, splits)
    split_len = (lens + n - 1) // n
    sid = pos[None, :] // split_len.clamp(min=1)[:, None]  # [rows, width]
    for j in range(splits):
        mask = (valid & (sid == j))[:, None, :]
        sj = s.masked_fill(~mask, float("-inf"))
        m = sj.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
        p = torch.exp(sj - m) * mask
        denom = p.sum(-1)
        md.attn_logits[:rows, :, j, :] = torch.einsum("rhw,rwhd->rhd", p, v) / denom.clamp(min=1e-30)[..., None]
        md.attn_lse[:rows, :, j] = torch.where(denom > 0, m[..., 0] + denom.clamp(min=1e-30).log(), float("-inf"))
    used = torch.arange(splits, device=q.device)[None, None, :] < n[:, None, None]
    lse = md.attn_lse[:rows].masked_fill(~used, float("-inf"))
    w = torch.softmax(lse, dim=-1).nan_to_num(0.0)  # a row with no key: zeros
    return torch.einsum("rhs,rhsd->rhd", w, md.attn_logits[:rows]).to(q.dtype)


class TritonAttnBackend:
    """SGLang's Triton backend, in torch (see the module docstring)."""

    split_tile = 32  # keys per split before another split is used

    def __init__(self, model_runner: Any) -> None:
        mc = model_runner.model_config
        self.device = torch.device(model_runner.device)
        self.num_head, self.num_kv_head = mc.num_attention_heads, mc.num_key_value_heads
        self.head_dim = self.v_head_dim = mc.head_dim
        self.max_context_len = mc.context_len
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.max_kv_splits = getattr(model_runner, "max_kv_splits", 8)
        self.kv_indptr = torch.zeros(self.req_to_token.shape[0] + 1, dtype=torch.int32, device=self.device)
        self.forward_metadata: ForwardMetadata | None = None

    # -- metadata ---------------------------------------------------------------------------
    def get_num_kv_splits(self, num_kv_splits: torch.Tensor, seq_lens: torch.Tensor, *_: Any) -> None:
        tiles = (seq_lens.long() + self.split_tile - 1) // self.split_tile
        num_kv_splits.copy_(tiles.clamp(1, self.max_kv_splits))

    def _fill_kv(self, bs: int, req_pool_indices, seq_lens, kv_indptr: torch.Tensor, kv_indices: torch.Tensor) -> None:
        lens = seq_lens[:bs].long()
        kv_indptr[0] = 0
        kv_indptr[1 : bs + 1] = torch.cumsum(lens, 0).to(kv_indptr.dtype)
        take = torch.arange(self.max_context_len, device=self.device)[None, :] < lens[:, None]
        tokens = self.req_to_token[req_pool_indices[:bs].long()]
        values = tokens[take]
        kv_indices[: values.numel()] = values.to(kv_indices.dtype)

    def init_forward_metadata(self, forward_batch: Any) -> None:
        """The eager path: fresh tensors for this batch."""
        bs = forward_batch.batch_size
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=self.device)
        kv_indices = torch.zeros(
            max(1, int(forward_batch.seq_lens_cpu[:bs].sum())), dtype=torch.int64, device=self.device
        )
        self._fill_kv(bs, forward_batch.req_pool_indices, forward_batch.seq_lens, kv_indptr, kv_indices)
        num_kv_splits = torch.empty(bs, dtype=torch.int32, device=self.device)
        self.get_num_kv_splits(num_kv_splits, forward_batch.seq_lens[:bs])
        self.forward_metadata = ForwardMetadata(
            attn_logits=torch.zeros(bs, self.num_head, self.max_kv_splits, self.v_head_dim, device=self.device),
            attn_lse=torch.zeros(bs, self.num_head, self.max_kv_splits, device=self.device),
            num_kv_splits=num_kv_splits,
            kv_indptr=kv_indptr,
            kv_indices=kv_indices,
        )

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int, *_: Any, **__: Any) -> None:
        dev = self.device
        self.cuda_graph_attn_logits = torch.zeros(
            max_num_tokens, self.num_head, self.max_kv_splits, self.v_head_dim, device=dev
        )
        self.cuda_graph_attn_lse = torch.zeros(max_num_tokens, self.num_head, self.max_kv_splits, device=dev)
        self.cuda_graph_num_kv_splits = torch.full((max_bs,), self.max_kv_splits, dtype=torch.int32, device=dev)
        self.cuda_graph_kv_indices = torch.zeros(max_num_tokens * self.max_context_len, dtype=torch.int64, device=dev)

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return 1

    def init_forward_metadata_out_graph(self, forward_batch: Any, in_capture: bool = False) -> None:
        """Capture: refresh the persistent buffers and build the metadata over them; replay: refresh the
        buffers, the captured metadata object is reused."""
        bs = forward_batch.batch_size
        self._fill_kv(
            bs, forward_batch.req_pool_indices, forward_batch.seq_lens, self.kv_indptr, self.cuda_graph_kv_indices
        )
        self.get_num_kv_splits(self.cuda_graph_num_kv_splits[:bs], forward_batch.seq_lens[:bs])
        if in_capture:
            self.forward_metadata = ForwardMetadata(
                attn_logits=self.cuda_graph_attn_logits,
                attn_lse=self.cuda_graph_attn_lse,
                num_kv_splits=self.cuda_graph_num_kv_splits,
                kv_indptr=self.kv_indptr[: bs + 1],
                kv_indices=self.cuda_graph_kv_indices,
            )

    def init_forward_metadata_in_graph(self, forward_batch: Any) -> None:
        """Nothing: the Triton backend prepares all of its metadata outside the graph."""

    def on_after_cuda_graph_warmup(self) -> None:
        """Nothing to undo after the warm-up."""

    # -- attention ---------------------------------------------------------------------------
    def forward_decode(self, q, k, v, layer: Any, forward_batch: Any, save_kv_cache: bool = True, **_: Any):
        q = q.reshape(-1, layer.tp_q_head_num * layer.qk_head_dim)
        if save_kv_cache:
            self.token_to_kv_pool.set_kv_buffer(layer, forward_batch.out_cache_loc, k, v)
        md = self.forward_metadata
        assert md is not None, "forward_decode before any init_forward_metadata"
        kb = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        vb = self.token_to_kv_pool.get_value_buffer(layer.layer_id)
        rows = q.shape[0]
        o = decode_attention(q.view(rows, layer.tp_q_head_num, -1), kb, vb, md, layer.scaling, self.max_context_len)
        return o.reshape(rows, -1)


class FlashInferAttnBackend(TritonAttnBackend):
    """SGLang's FlashInfer backend, in torch: the Triton stand-in's decode without splitting the KV."""

    def __init__(self, model_runner: Any) -> None:
        super().__init__(model_runner)
        self.max_kv_splits = 1

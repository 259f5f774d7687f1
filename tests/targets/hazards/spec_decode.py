"""Uniform decode with speculative tokens (q = 1 + num_spec, Support.UNIFORM_BATCH).

Each request has ``q`` query tokens: the last accepted token and ``q - 1`` drafts.  The
per-token key count is derived on the device: ``tok_len = seq_len - q + 1 + i`` for the
token's index ``i``; the output goes through a per-tensor amax scale (fp8 output quant).
Padded request slots have ``seq_len 0`` and, for ``q > 1``, negative per-token lengths;
token rows past ``num_slots * q`` belong to a sentinel request (``seq_len 0``) at index
``i = q - 1``, so their length is 0.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import torch  # noqa: E402

from graphsafe import Batch, CaptureSpec, Support  # noqa: E402

from ._common import D, H, PagedTarget, masked_softmax_attention, padded_table, write_rows  # noqa: E402

SPEC = CaptureSpec(max_reqs=4, max_query_len=3, max_seq_len=16, block_size=4)


class SpecDecode(PagedTarget):
    """Safe: padded tokens are recognised by ``tok_len > 0``, so negative lengths give 0."""

    support = Support.UNIFORM_BATCH
    default_spec = SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        R, T = spec.max_reqs, self.max_tokens
        self.sentinel = R  # request index of token rows past the padded requests
        self.seq_lens = torch.zeros(R + 1, dtype=torch.int32, device=self.device)
        self.block_table = torch.zeros(R + 1, self.bps, dtype=torch.int32, device=self.device)
        self.token_req = torch.full((T,), R, dtype=torch.int64, device=self.device)
        self.token_idx = torch.zeros(T, dtype=torch.int32, device=self.device)
        self.q_len = torch.ones(1, dtype=torch.int32, device=self.device)

    def prepare(self, batch: Batch) -> None:
        self.set_sizes(batch)
        self.write_inputs(batch)
        q = batch.query_lens[0]  # uniform
        reqs, idx = [], []
        for t in range(batch.num_slots * q):  # live requests, then padded requests (seq_len 0)
            reqs.append(t // q)
            idx.append(t % q)
        write_rows(self.token_req, reqs, self.sentinel)
        write_rows(self.token_idx, idx, q - 1)
        write_rows(self.seq_lens, list(batch.seq_lens), 0)
        write_rows(self.block_table, padded_table(batch, self.bps), 0)
        self.q_len.fill_(q)

    def pad_guard(self, tok_len: torch.Tensor) -> torch.Tensor:
        return tok_len > 0

    def forward(self):
        rows = self.num_rows
        self.write_kv(rows)
        req = self.token_req[:rows]
        tok_len = self.seq_lens[req] - self.q_len + 1 + self.token_idx[:rows]
        bt = self.block_table[req].long()
        k = self.k_cache[bt].reshape(rows, -1, H, D)
        v = self.v_cache[bt].reshape(rows, -1, H, D)
        out = masked_softmax_attention(self.q[:rows], k, v, tok_len, guard=False)
        out = torch.where(self.pad_guard(tok_len)[:, None, None], out, 0.0).reshape(rows, H * D)
        scale = out.abs().amax().clamp_min(1e-6)
        return out / scale


class SpecDecodeZeroGuard(SpecDecode):
    """Buggy (poisoned padding, negative per-token length): the pad guard tests ``tok_len != 0``.

    How it happens: the guard was written for plain decode, where a padded slot's length is
    0.  With speculative decoding the per-token length of a padded slot is
    ``0 - q + 1 + i``, negative for every draft position, so those rows are all-masked
    softmax rows (0/0 = NaN) that pass the guard; the per-tensor amax spreads NaN to every
    live row (vLLM #51538 with MTP).  Eager runs have no padded slots.  Expected:
    stale-padding.
    """

    def pad_guard(self, tok_len: torch.Tensor) -> torch.Tensor:
        return tok_len != 0

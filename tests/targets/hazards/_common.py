"""Pieces the hazard targets share: sizes, a paged KV cache with a pad slot, seeded step inputs.

Nothing here is a target.  The layout follows what serving engines do:

* a paged KV cache ``[num_blocks, block_size, H, D]`` whose block 0 is the reserved null block;
  the flat storage has one extra row past the last block, the *pad slot*, where padded tokens
  write their K/V (vLLM's ``PAD_SLOT_ID`` skips them; a dedicated row is the plain-torch way);
* per step, ``prepare`` draws the new tokens' ``q``/``k``/``v`` from the batch seed and builds
  host metadata (per-token request, key count, slot) that is copied into persistent buffers;
* ``reference_attention`` is plain softmax attention over the same cache, used by
  ``eager_check.py`` to show that every target is right when run eagerly.
"""

from __future__ import annotations

from graphsafe.engines.triton_env import use_interpreter

use_interpreter()  # before any @triton.jit kernel of this package is defined

import math  # noqa: E402

import torch  # noqa: E402

import graphsafe  # noqa: E402
from graphsafe import Batch, CaptureSpec, Target  # noqa: E402

H = 2  # heads
D = 8  # head dim
SCALE = 1.0 / math.sqrt(D)


def write_rows(buf: torch.Tensor, values, pad) -> None:
    """``buf[:len(values)] = values`` and every row after it ``= pad`` (both with copy_/fill_)."""
    values = torch.as_tensor(values, dtype=buf.dtype)
    n = values.shape[0]
    if n:
        buf[:n].copy_(values.to(buf.device))
    buf[n:].fill_(pad)


def padded_table(batch: Batch, width: int, rows: int | None = None) -> torch.Tensor:
    """Block table as an int32 ``[rows, width]`` host tensor, unused entries 0 (the null block)."""
    rows = batch.num_reqs if rows is None else rows
    t = torch.zeros(rows, width, dtype=torch.int32)
    for r, row in enumerate(batch.block_table):
        t[r, : len(row)] = torch.tensor(row, dtype=torch.int32)
    return t


def token_rows(batch: Batch, block_size: int) -> list[tuple[int, int, int, int]]:
    """Per live token: (request, index in its query, position in its sequence, KV slot)."""
    out = []
    for r, (q, s, row) in enumerate(zip(batch.query_lens, batch.seq_lens, batch.block_table)):
        for i in range(q):
            pos = s - q + i
            out.append((r, i, pos, row[pos // block_size] * block_size + pos % block_size))
    return out


class PagedTarget(Target):
    """Common set-up: KV cache (static), per-token inputs and slot mapping, host slot count.

    ``self.num_slots`` is the request-slot count of this step (the graph's size when the
    checker pads; the batch's own size when it runs eagerly); ``self.num_rows`` the token rows
    one step covers: ``num_slots * spec.max_query_len``.
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        self.spec, self.device = spec, torch.device(device)
        self.bs = spec.block_size
        self.bps = spec.blocks_per_seq
        self.max_tokens = spec.max_reqs * spec.max_query_len
        self.pad_slot = spec.num_blocks * spec.block_size
        flat = (spec.num_blocks * spec.block_size + 1, H, D)
        self.k_flat = torch.zeros(flat, device=self.device)
        self.v_flat = torch.zeros(flat, device=self.device)
        self.k_cache = self.k_flat[:-1].view(spec.num_blocks, spec.block_size, H, D)
        self.v_cache = self.v_flat[:-1].view(spec.num_blocks, spec.block_size, H, D)
        self.q = torch.zeros(self.max_tokens, H, D, device=self.device)
        self.k_new = torch.zeros(self.max_tokens, H, D, device=self.device)
        self.v_new = torch.zeros(self.max_tokens, H, D, device=self.device)
        self.slot_mapping = torch.full((self.max_tokens,), self.pad_slot, dtype=torch.int64, device=self.device)
        self.num_slots = spec.max_reqs
        self.num_rows = self.max_tokens

    def static(self):
        return {"k_cache": self.k_cache, "v_cache": self.v_cache}

    # -- per step, host side ------------------------------------------------------------
    def set_sizes(self, batch: Batch) -> None:
        self.num_slots = batch.num_slots
        self.num_rows = batch.num_slots * self.spec.max_query_len

    def write_inputs(self, batch: Batch) -> None:
        """This step's new tokens (seeded from the batch) and where their K/V go; padding zeroed."""
        n = batch.num_tokens
        for name, buf in (("q", self.q), ("k", self.k_new), ("v", self.v_new)):
            vals = graphsafe.seeded((n, H, D), seed=graphsafe.derive_seed(batch.seed, name), device=self.device)
            buf[:n].copy_(vals)
            buf[n:].zero_()
        self.write_slots(batch)

    def write_slots(self, batch: Batch) -> None:
        slots = [slot for _, _, _, slot in token_rows(batch, self.bs)]
        write_rows(self.slot_mapping, slots, self.pad_slot)

    # -- inside forward ---------------------------------------------------------------------
    def write_kv(self, rows: int) -> None:
        """Store the new tokens' K/V (reshape_and_cache); padded tokens go to the pad slot."""
        self.k_flat.index_copy_(0, self.slot_mapping[:rows], self.k_new[:rows])
        self.v_flat.index_copy_(0, self.slot_mapping[:rows], self.v_new[:rows])


def masked_softmax_attention(q, k, v, n_keys, guard: bool = True):
    """Plain-torch attention of ``q [n, H, D]`` over ``k, v [n, L, H, D]``, keys ``< n_keys[n]``.

    Rows with no key give 0 when ``guard`` (else 0/0 = NaN, as unguarded kernels do).
    """
    L = k.shape[1]
    scores = torch.einsum("nhd,nlhd->nhl", q, k) * SCALE
    pos = torch.arange(L, device=q.device)
    valid = pos[None, :] < n_keys[:, None]
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    if guard:
        p = torch.where((n_keys > 0)[:, None, None], p, 0.0)
    return torch.einsum("nhl,nlhd->nhd", p, v)


# -- reference (for eager_check.py only) ---------------------------------------------------
def reference_attention(
    batch: Batch, spec: CaptureSpec, k_cache: torch.Tensor, v_cache: torch.Tensor, temperature: float | None = None
) -> torch.Tensor:
    """Expected ``[num_tokens, H*D]`` for ``batch`` over a cache that already holds its new K/V."""
    bs = spec.block_size
    q_all = graphsafe.seeded((batch.num_tokens, H, D), seed=graphsafe.derive_seed(batch.seed, "q"))
    outs = []
    for t, (r, _i, pos, _) in enumerate(token_rows(batch, bs)):
        row = batch.block_table[r]
        keys = torch.stack([k_cache[row[j // bs], j % bs] for j in range(pos + 1)])  # [L, H, D]
        vals = torch.stack([v_cache[row[j // bs], j % bs] for j in range(pos + 1)])
        q = q_all[t] * (temperature if temperature is not None else 1.0)
        s = torch.einsum("hd,lhd->hl", q, keys) * SCALE
        outs.append(torch.einsum("hl,lhd->hd", torch.softmax(s, -1), vals).reshape(-1))
    return torch.stack(outs)


def write_reference_kv(batch: Batch, spec: CaptureSpec, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """Put the batch's new K/V into a reference cache the way the targets do."""
    bs = spec.block_size
    k_new = graphsafe.seeded((batch.num_tokens, H, D), seed=graphsafe.derive_seed(batch.seed, "k"))
    v_new = graphsafe.seeded((batch.num_tokens, H, D), seed=graphsafe.derive_seed(batch.seed, "v"))
    for t, (_, _, _, slot) in enumerate(token_rows(batch, bs)):
        k_cache[slot // bs, slot % bs] = k_new[t]
        v_cache[slot // bs, slot % bs] = v_new[t]

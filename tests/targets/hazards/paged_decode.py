"""Paged decode attention in plain torch (one query token per request), and how it goes wrong.

``PagedDecode`` is the safe backend: ``prepare`` copies this step's ``seq_lens``,
block-table rows and slot mapping into buffers allocated in ``setup`` for ``max_reqs``
slots, padded slots get ``seq_len 0`` / the null block / the pad slot, and ``forward``
(the captured region) writes the new K/V into the paged cache, gathers each request's
blocks and runs masked softmax attention.  The only host value ``forward`` uses is the
slot count, which is the graph's size.

Each buggy class below changes one thing, the way wrappers in serving engines did.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import collections  # noqa: E402
import math  # noqa: E402

import torch  # noqa: E402

from graphsafe import Batch, CaptureSpec, Support  # noqa: E402

from ._common import D, H, PagedTarget, masked_softmax_attention, padded_table, token_rows, write_rows  # noqa: E402

SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=16, block_size=4)


class PagedDecode(PagedTarget):
    """Safe: persistent metadata buffers written with ``copy_``/``fill_``, padding made harmless."""

    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.seq_lens = torch.zeros(spec.max_reqs, dtype=torch.int32, device=self.device)
        self.block_table = torch.zeros(spec.max_reqs, self.bps, dtype=torch.int32, device=self.device)

    def write_metadata(self, batch: Batch) -> None:
        write_rows(self.seq_lens, list(batch.seq_lens), 0)
        write_rows(self.block_table, padded_table(batch, self.bps), 0)

    def prepare(self, batch: Batch) -> None:
        self.set_sizes(batch)
        self.write_inputs(batch)
        self.write_metadata(batch)

    def query(self, n: int) -> torch.Tensor:
        return self.q[:n]

    def gather_kv(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        bt = self.block_table[:n].long()
        k = self.k_cache[bt].reshape(n, -1, H, D)
        v = self.v_cache[bt].reshape(n, -1, H, D)
        return k, v

    def attend(self, n: int, guard: bool = True) -> torch.Tensor:
        k, v = self.gather_kv(n)
        return masked_softmax_attention(self.query(n), k, v, self.seq_lens[:n], guard=guard)

    def forward(self):
        n = self.num_slots
        self.write_kv(n)
        return self.attend(n).reshape(n, H * D)


# -- stale-pointer ---------------------------------------------------------------------------
class FreshSeqLens(PagedDecode):
    """Buggy (stale pointer): ``prepare`` builds ``seq_lens`` anew each step and rebinds it.

    How it happens: the metadata builder turns the scheduler's host list into a device
    tensor (``torch.cat(...).to(torch.int32)``) and stores it on the backend, like vLLM
    #51994 (``causal.to(int32)`` on every build) or #35175.  The graph captured the first
    tensor's address; the next build drops the last reference to it, so replays read freed
    memory.  Expected: stale-pointer on ``self.seq_lens``.
    """

    def write_metadata(self, batch: Batch) -> None:
        pad = self.spec.max_reqs - batch.num_reqs
        lens = torch.cat([torch.tensor(batch.seq_lens), torch.zeros(pad, dtype=torch.int64)])
        self.seq_lens = lens.to(device=self.device, dtype=torch.int32)
        write_rows(self.block_table, padded_table(batch, self.bps), 0)


class _ShapeCache:
    """A small LRU of device tensors keyed by batch shape (what a metadata builder might keep)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: collections.OrderedDict = collections.OrderedDict()

    def get(self, key, make):
        t = self.items.get(key)
        if t is None:
            t = make()
            self.items[key] = t
            if len(self.items) > self.capacity:
                self.items.popitem(last=False)  # evict (drop) the oldest tensor
        else:
            self.items.move_to_end(key)
        return t


class CachedBlockTable(PagedDecode):
    """Buggy (stale pointer): block tables come from an LRU cache keyed by the batch's shape.

    How it happens: to avoid re-allocating, the builder keeps one device block-table tensor
    per ``(num_slots, blocks in the longest row)`` in a 3-entry LRU and copies each step's
    table into the entry for this step's shape.  A batch of a new shape gets a new tensor
    (the captured one is then not written), and once three other shapes have been seen the
    captured tensor is evicted and freed.  One cause: the graph's block table is not a
    persistent buffer.  Expected: exactly stale-pointer on ``self.block_table``.
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.table_cache = _ShapeCache(capacity=3)

    def write_metadata(self, batch: Batch) -> None:
        write_rows(self.seq_lens, list(batch.seq_lens), 0)
        width = max(len(row) for row in batch.block_table)
        key = (batch.num_slots, width)
        bt = self.table_cache.get(
            key, lambda: torch.zeros(batch.num_slots, self.bps, dtype=torch.int32, device=self.device)
        )
        bt.copy_(padded_table(batch, self.bps, rows=batch.num_slots))
        self.block_table = bt


# -- stale-padding ---------------------------------------------------------------------------
class PrefixOnlyMetadata(PagedDecode):
    """Buggy (stale padding): ``prepare`` writes metadata only for the live requests.

    How it happens: ``seq_lens[:num_reqs]``, ``block_table[:num_reqs]`` and
    ``slot_mapping[:num_tokens]`` are refreshed and the padded tail is left as it was.
    After a larger batch (or the capture's worst-case batch) the padded slots keep a real
    request's slot mapping, and ``forward`` writes the padded tokens' (zero) K/V into that
    request's KV block: the cache of a live or idle request is corrupted (vLLM #39458's
    tail zeroing, SGLang #10892).  Expected: stale-padding.
    """

    def write_slots(self, batch: Batch) -> None:
        slots = [slot for _, _, _, slot in token_rows(batch, self.bs)]
        self.slot_mapping[: len(slots)].copy_(torch.tensor(slots, dtype=torch.int64))

    def write_metadata(self, batch: Batch) -> None:
        r = batch.num_reqs
        self.seq_lens[:r].copy_(torch.tensor(batch.seq_lens, dtype=torch.int32))
        self.block_table[:r].copy_(padded_table(batch, self.bps))


class Fp8OutPagedDecode(PagedDecode):
    """Safe: attention output scaled by a per-tensor amax (as before an fp8 output quant).

    The amax runs over every row of the step, padded rows included; padded rows have no key
    and the softmax guard makes them 0, so they do not move the scale.
    """

    guard = True

    def forward(self):
        n = self.num_slots
        self.write_kv(n)
        out = self.attend(n, guard=self.guard).reshape(n, H * D)
        scale = out.abs().amax().clamp_min(1e-6)
        return out / scale


class NanPaddingFp8Out(Fp8OutPagedDecode):
    """Buggy (poisoned padding): no guard for rows with no key.

    How it happens: padded slots get ``seq_len 0``; the masked softmax of an all-masked row
    is 0/0 = NaN; the batch-wide amax (per-tensor fp8 scale) turns NaN and every live row
    becomes NaN (vLLM #57094/#57017; the graph always has padded slots, eager runs often
    none).  Expected: stale-padding.
    """

    guard = False


# -- capture-failure -------------------------------------------------------------------------
class TrimmedGather(PagedDecode):
    """Buggy (capture failure): the batched path trims the KV gather with a host read.

    How it happens: for more than one slot the wrapper gathers only the blocks the longest
    sequence needs, reading ``seq_lens.max()`` back to the host inside ``forward``.  Eager
    this is a harmless optimisation; a capture of any size > 1 hits a device-to-host sync
    (vLLM #48749, #55404).  Expected: capture-failure.
    """

    def gather_kv(self, n: int):
        if n == 1:
            return super().gather_kv(n)
        longest = int(self.seq_lens[:n].max())  # device -> host inside the captured region
        width = max(1, math.ceil(longest / self.bs))
        bt = self.block_table[:n, :width].long()
        return self.k_cache[bt].reshape(n, -1, H, D), self.v_cache[bt].reshape(n, -1, H, D)


# -- frozen-host-value -----------------------------------------------------------------------
TEMP_FLOOR = 8.0
TEMP_BETA = 0.5


class DeviceTemperature(PagedDecode):
    """Safe: length-dependent attention temperature computed on the device.

    Long-context temperature tuning (as in Llama-4-style attention scaling): queries are
    scaled by ``1 + beta * log1p(max_seq_len / floor)`` of the step; the max is taken on the
    device over the step's ``seq_lens`` (padded slots are 0 and do not change it).
    """

    def query(self, n: int) -> torch.Tensor:
        longest = self.seq_lens[:n].amax().float()
        return self.q[:n] * (1.0 + TEMP_BETA * torch.log1p(longest / TEMP_FLOOR))


class HostTemperature(DeviceTemperature):
    """Buggy (frozen host value): the same temperature computed in ``prepare`` as a Python float.

    How it happens: the builder computes the scale from ``batch.max_seq_len`` on the host and
    ``forward`` multiplies by ``self.temperature``; capture freezes the capture batch's value
    (the worst case), so every later batch is scaled as if it were ``max_seq_len`` long.
    Expected: frozen-host-value.
    """

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.temperature = 1.0 + TEMP_BETA * math.log1p(batch.max_seq_len / TEMP_FLOOR)

    def query(self, n: int) -> torch.Tensor:
        return self.q[:n] * self.temperature

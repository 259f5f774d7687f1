"""Metadata written into a persistent buffer that exists, but is not the one the graph reads.

Every buggy class here writes this step's metadata with ``copy_``/``fill_`` into a buffer
allocated in ``setup`` (nothing is freed, nothing is rebound), yet the graph reads another
one: two copies used in turn, the copy of another batch size, another wrapper's buffers.
Their safe twins write the same values into the buffer the graph reads.

* ``PingPongMetadata`` / ``PingPongStaging``: plain-torch decode with double-buffered
  metadata (two persistent copies used in turn);
* ``PingPongPackedVarlen`` / ``PingPongPackedStaging``: Triton varlen (mixed batches), the
  two copies of the per-token metadata in one allocation;
* ``MetadataOfBatchSize`` / ``PerSizeMetadata``: Triton split-KV decode with one metadata
  buffer per batch size;
* ``PlanOnEagerWrapper`` / ``WrapperPair``: FlashInfer-style wrappers (index buffers fixed at
  construction, a shared workspace), one for eager runs and one for the graph.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import torch  # noqa: E402

import graphsafe  # noqa: E402
from graphsafe import Batch, CaptureSpec, Support  # noqa: E402

from ._common import SCALE, D, H, PagedTarget, masked_softmax_attention, padded_table, token_rows, write_rows  # noqa: E402
from .paged_decode import PagedDecode  # noqa: E402
from .split_kv import MAX_SPLITS, SplitKVDecode, _split_stage1, _split_stage2  # noqa: E402
from .varlen import VarlenAttention, _varlen_kernel  # noqa: E402

SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=16, block_size=4)
SPLIT_SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=8, block_size=4)  # two splits
VARLEN_SPEC = CaptureSpec(max_reqs=2, max_query_len=2, max_seq_len=16, block_size=8)  # four token rows


class _Metadata:
    """One copy of a decode step's metadata: per-request ``seq_lens`` and block-table rows."""

    def __init__(self, rows: int, width: int, device):
        self.seq_lens = torch.zeros(rows, dtype=torch.int32, device=device)
        self.block_table = torch.zeros(rows, width, dtype=torch.int32, device=device)

    def write(self, batch: Batch, width: int) -> None:
        write_rows(self.seq_lens, list(batch.seq_lens), 0)
        write_rows(self.block_table, padded_table(batch, width), 0)


# -- two persistent copies used in turn (plain torch, decode) ----------------------------------
class PingPongStaging(PagedDecode):
    """Safe: metadata built in two staging copies used in turn, then ``copy_``-ed into the
    buffers the graph reads.

    Double buffering lets the host build step k+1's metadata while step k still runs; the
    copy into ``self.seq_lens`` / ``self.block_table`` (allocated in ``setup``) is what makes
    it safe under a graph.
    """

    default_spec = SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.meta = [_Metadata(spec.max_reqs, self.bps, self.device) for _ in range(2)]
        self.cur = 0

    def write_metadata(self, batch: Batch) -> None:
        self.cur = 1 - self.cur
        m = self.meta[self.cur]
        m.write(batch, self.bps)
        self.seq_lens.copy_(m.seq_lens)
        self.block_table.copy_(m.block_table)


class PingPongMetadata(PingPongStaging):
    """Buggy (unpersisted metadata): ``forward`` reads the current copy of the double buffer.

    How it happens: the builder alternates between two persistent metadata copies and the
    attention reads ``self.meta[self.cur]`` directly.  The graph captured whichever copy was
    current at capture; every other step's ``prepare`` writes the other copy, so the graph
    replays with the metadata of two steps ago (or of the capture).  Both copies are
    persistent and alive: no pointer goes stale.  Expected: unpersisted-metadata on
    ``self.meta[i].seq_lens`` (and ``.block_table``), this step's values in the other copy.
    """

    def write_metadata(self, batch: Batch) -> None:
        self.cur = 1 - self.cur
        self.meta[self.cur].write(batch, self.bps)

    def gather_kv(self, n: int):
        bt = self.meta[self.cur].block_table[:n].long()
        return self.k_cache[bt].reshape(n, -1, H, D), self.v_cache[bt].reshape(n, -1, H, D)

    def attend(self, n: int, guard: bool = True) -> torch.Tensor:
        k, v = self.gather_kv(n)
        return masked_softmax_attention(self.query(n), k, v, self.meta[self.cur].seq_lens[:n], guard=guard)


# -- two copies in one allocation (Triton varlen, mixed batches) -------------------------------
class PingPongPackedStaging(VarlenAttention):
    """Safe: per-token metadata staged in one ``[2, 2, T]`` allocation (two copies of
    ``token_req`` and ``tok_len``, used in turn), then copied into the buffers the kernel reads."""

    default_spec = VARLEN_SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.tok_meta = torch.zeros(2, 2, self.max_tokens, dtype=torch.int32, device=self.device)
        self.cur = 0

    def write_token_metadata(self, batch: Batch) -> None:
        self.cur = 1 - self.cur
        rows = token_rows(batch, self.bs)
        write_rows(self.tok_meta[self.cur, 0], [r for r, _, _, _ in rows], 0)
        write_rows(self.tok_meta[self.cur, 1], [pos + 1 for _, _, pos, _ in rows], 0)

    def write_metadata(self, batch: Batch) -> None:
        self.write_token_metadata(batch)
        self.token_req.copy_(self.tok_meta[self.cur, 0])
        self.tok_len.copy_(self.tok_meta[self.cur, 1])
        write_rows(self.seq_lens, list(batch.seq_lens), 0)
        write_rows(self.block_table, padded_table(batch, self.bps), 0)


class PingPongPackedVarlen(PingPongPackedStaging):
    """Buggy (unpersisted metadata): the kernel reads the current half of a packed double buffer.

    How it happens: one ``[2, 2, T]`` int32 allocation holds two copies of the per-token
    metadata (one host-to-device copy per step), and the kernel gets the views
    ``tok_meta[cur, 0]`` and ``tok_meta[cur, 1]``.  The graph froze the capture's half; every
    other step writes the other half of the same allocation, so a write ledger that counts
    whole allocations sees it "written" every step.  Expected: unpersisted-metadata on
    ``self.tok_meta`` (the half the graph read), this step's values in the other half.
    """

    def write_metadata(self, batch: Batch) -> None:
        self.write_token_metadata(batch)
        write_rows(self.seq_lens, list(batch.seq_lens), 0)
        write_rows(self.block_table, padded_table(batch, self.bps), 0)

    def launch_varlen(self, grid: int, rows=None) -> None:
        token_req, tok_len = self.tok_meta[self.cur]
        _varlen_kernel[(grid,)](
            self.q,
            self.k_flat,
            self.v_flat,
            self.block_table,
            token_req,
            tok_len,
            tok_len,
            self.out,
            self.max_kv_blocks,
            self.block_table.stride(0),
            SCALE,
            H=H,
            D=D,
            BS=self.bs,
            INDIRECT=False,
        )


# -- the buffer of another batch size (Triton split-KV decode) ---------------------------------
class PerSizeMetadata(SplitKVDecode):
    """Safe: one metadata buffer per graph size, looked up by the padded size on both sides.

    The wrapper keeps metadata per batch size (as engines keep one CUDA-graph wrapper per
    captured size); ``prepare`` and ``forward`` both use ``batch.num_slots``, the graph's size.
    """

    default_spec = SPLIT_SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.by_size = {n: _Metadata(n, self.bps, self.device) for n in range(1, spec.max_reqs + 1)}

    def metadata_for(self, batch: Batch) -> _Metadata:
        return self.by_size[batch.num_slots]

    def prepare(self, batch: Batch) -> None:
        self.set_sizes(batch)
        self.write_inputs(batch)
        self.metadata_for(batch).write(batch, self.bps)

    def forward(self):
        n = self.num_slots
        m = self.by_size[n]
        self.write_kv(n)
        _split_stage1[(n, self.num_splits)](
            self.q,
            self.k_flat,
            self.v_flat,
            m.block_table,
            m.seq_lens,
            m.seq_lens,
            m.seq_lens,
            self.part_acc,
            self.part_ml,
            self.split_len,
            self.num_splits,
            m.block_table.stride(0),
            SCALE,
            H=H,
            D=D,
            BS=self.bs,
            MAX_SPLITS=MAX_SPLITS,
            RANGE=0,
        )
        _split_stage2[(n,)](self.part_acc, self.part_ml, self.out, self.num_splits, H=H, D=D, MAX_SPLITS=MAX_SPLITS)
        return self.out[:n].reshape(n, H * D)


class MetadataOfBatchSize(PerSizeMetadata):
    """Buggy (unpersisted metadata): ``prepare`` looks the buffers up by the live request count.

    How it happens: the metadata builder indexes its per-size buffers by ``num_reqs`` while the
    graph runner pads the batch to the captured size and replays the graph that reads the
    buffers of that size (capture and replay code paths disagree on "the batch size",
    vLLM #38311, SGLang #26134).  Unpadded batches are right; a padded one writes the buffers
    of a smaller size, which exist and are alive.  Expected: unpersisted-metadata on
    ``self.by_size[n].seq_lens`` (and ``.block_table``).
    """

    def metadata_for(self, batch: Batch) -> _Metadata:
        return self.by_size[batch.num_reqs]


# -- another wrapper's buffers (FlashInfer-style, plain torch, decode) -------------------------
class _DecodeWrapper:
    """A decode wrapper in FlashInfer's CUDA-graph mode: index buffers fixed at construction,
    ``plan()`` copies a batch's metadata into them, ``run()`` reads them.  The score workspace
    is given, and shared by every wrapper of the backend."""

    def __init__(self, workspace: torch.Tensor, rows: int, width: int, device):
        self.workspace = workspace
        self.kv_lens = torch.zeros(rows, dtype=torch.int32, device=device)
        self.kv_indices = torch.zeros(rows, width, dtype=torch.int32, device=device)

    def plan(self, batch: Batch, width: int) -> None:
        write_rows(self.kv_lens, list(batch.seq_lens), 0)
        write_rows(self.kv_indices, padded_table(batch, width), 0)

    def run(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, n: int) -> torch.Tensor:
        bt = self.kv_indices[:n].long()
        k = k_cache[bt].reshape(n, -1, H, D)
        v = v_cache[bt].reshape(n, -1, H, D)
        L = k.shape[1]
        ws = self.workspace[: n * H]
        torch.bmm(q[:n].reshape(n * H, 1, D), k.permute(0, 2, 3, 1).reshape(n * H, D, L), out=ws)
        scores = ws.view(n, H, L) * SCALE
        valid = torch.arange(L, device=q.device)[None, :] < self.kv_lens[:n, None]
        p = torch.softmax(scores.masked_fill(~valid[:, None, :], float("-inf")), dim=-1)
        p = torch.where((self.kv_lens[:n] > 0)[:, None, None], p, 0.0)
        return torch.einsum("nhl,nlhd->nhd", p, v).reshape(n, H * D)


class WrapperPair(PagedTarget):
    """Safe: an eager wrapper and a CUDA-graph wrapper sharing one workspace; ``prepare`` plans both.

    ``forward`` runs the graph wrapper while capturing (``graphsafe.capturing()``) and the eager
    one otherwise, as engines that keep separate CUDA-graph wrappers do.
    """

    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        L = self.bps * self.bs
        self.workspace = torch.empty(spec.max_reqs * H, 1, L, device=self.device)
        self.eager_wrapper = _DecodeWrapper(self.workspace, spec.max_reqs, self.bps, self.device)
        self.graph_wrapper = _DecodeWrapper(self.workspace, spec.max_reqs, self.bps, self.device)

    def planned(self) -> tuple[_DecodeWrapper, ...]:
        return (self.eager_wrapper, self.graph_wrapper)

    def prepare(self, batch: Batch) -> None:
        self.set_sizes(batch)
        self.write_inputs(batch)
        for w in self.planned():
            w.plan(batch, self.bps)

    def forward(self):
        n = self.num_slots
        self.write_kv(n)
        wrapper = self.graph_wrapper if graphsafe.capturing() else self.eager_wrapper
        return wrapper.run(self.q, self.k_cache, self.v_cache, n)


class PlanOnEagerWrapper(WrapperPair):
    """Buggy (unpersisted metadata): ``prepare`` plans only the eager wrapper.

    How it happens: the metadata builder holds the wrapper it was constructed with (the eager
    one) and plans it every step; the graph was captured with the CUDA-graph wrapper, whose
    index buffers nothing writes after construction (FlashInfer's "plan not refreshed",
    TensorRT-LLM #18769; the capture and replay paths diverged).  Expected:
    unpersisted-metadata on ``self.graph_wrapper.kv_lens`` (and ``.kv_indices``), this step's
    values in ``self.eager_wrapper``'s.
    """

    def planned(self) -> tuple[_DecodeWrapper, ...]:
        return (self.eager_wrapper,)

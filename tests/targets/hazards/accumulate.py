"""Buffers the graph reads and writes across replays: accumulators and work counters.

A kernel that adds into a buffer (split-K accumulation) or takes work from a counter
(a persistent kernel) needs the buffer reset before every run.  Reset inside the graph,
every replay starts clean.  Reset outside it (in ``prepare``) or behind a have-initialised
flag (only the warm-up ran it), a replay starts from whatever the last one left.

* ``SplitKAccumulateInPrepare`` / ``SplitKAccumulate``: Triton split-KV decode whose merge
  kernel adds each split into an fp32 accumulator, one launch per split;
* ``TileCounterInPrepare`` / ``TileCounter``: Triton persistent varlen attention (mixed
  batches): programs take token rows from an int32 counter with ``atomic_add``;
  ``TileCounterResetAfter`` (safe): the graph zeroes the counter after the kernel instead of before;
* ``SplitKAccumulateNeverReset`` / ``SplitKAccumulate``: the accumulator nothing resets;
* ``LazyZeroedAccumulator`` (twin ``workspace.SplitAccumulate``): plain torch, the
  accumulator zeroed behind a flag;
* ``LazyZeroedSplitK`` / ``SplitKAccumulate``: the Triton accumulator zeroed by a Triton
  kernel behind a flag.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from graphsafe import Batch, CaptureSpec  # noqa: E402

from ._common import SCALE, D, H  # noqa: E402
from .split_kv import MAX_SPLITS, SplitKVDecode, _split_stage1  # noqa: E402
from .varlen import VarlenAttention, _attend  # noqa: E402
from .workspace import SplitAccumulate  # noqa: E402

PROGRAMS = 2  # programs of the persistent kernel
#: split-K decode: two splits of four keys (the interpreter's cost grows with every split)
SPLIT_SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=8, block_size=4)


@triton.jit
def _merge_split(acc_ptr, ml_ptr, part_ptr, s, num_splits, H: tl.constexpr, D: tl.constexpr, MAX_SPLITS: tl.constexpr):
    """``acc[r] += weight of split s * its partial``: one launch per split (split-K style)."""
    r = tl.program_id(0)
    h = tl.arange(0, H)
    d = tl.arange(0, D)
    base = (r * H + h) * MAX_SPLITS  # [H]
    m_all = tl.load(ml_ptr + base * 2)
    for i in range(1, num_splits):
        m_all = tl.maximum(m_all, tl.load(ml_ptr + (base + i) * 2))
    l_all = tl.zeros([H], tl.float32)
    for i in range(0, num_splits):
        l_all += tl.exp(tl.load(ml_ptr + (base + i) * 2) - m_all) * tl.load(ml_ptr + (base + i) * 2 + 1)
    w = tl.exp(tl.load(ml_ptr + (base + s) * 2) - m_all) / tl.where(l_all > 0, l_all, 1.0)
    part = tl.load(part_ptr + (base[:, None] + s) * D + d[None, :])
    dst = acc_ptr + (r * H + h[:, None]) * D + d[None, :]
    tl.store(dst, tl.load(dst) + tl.where(l_all > 0, w, 0.0)[:, None] * part)


@triton.jit
def _zero_rows(ptr, ROW: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, ROW)
    tl.store(ptr + r * ROW + offs, tl.zeros([ROW], tl.float32))


# -- split-K accumulation (Triton, decode) -----------------------------------------------------
class SplitKAccumulate(SplitKVDecode):
    """Safe: stage one writes per-split partials; a merge kernel launched once per split adds
    each split into ``self.acc``, which ``forward`` zeroes first (inside the graph)."""

    default_spec = SPLIT_SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.acc = torch.zeros(spec.max_reqs, H, D, device=self.device)

    def reset_acc(self, n: int) -> None:
        self.acc[:n].zero_()

    def forward(self):
        n = self.num_slots
        self.write_kv(n)
        start, end = self.split_ranges()
        _split_stage1[(n, self.num_splits)](
            self.q,
            self.k_flat,
            self.v_flat,
            self.block_table,
            self.seq_lens,
            start,
            end,
            self.part_acc,
            self.part_ml,
            self.split_len,
            self.num_splits,
            self.block_table.stride(0),
            SCALE,
            H=H,
            D=D,
            BS=self.bs,
            MAX_SPLITS=MAX_SPLITS,
            RANGE=self.RANGE,
        )
        self.reset_acc(n)
        for s in range(self.num_splits):
            _merge_split[(n,)](
                self.acc, self.part_ml, self.part_acc, s, self.num_splits, H=H, D=D, MAX_SPLITS=MAX_SPLITS
            )
        return self.acc[:n].reshape(n, H * D).clone()  # the output is the graph's own copy


class SplitKAccumulateInPrepare(SplitKAccumulate):
    """Buggy (nondeterministic replay): the accumulator is zeroed by ``prepare``, not in the graph.

    How it happens: the builder "clears the workspace for the step" on the host side and the
    merge kernels only add.  One replay per ``prepare`` is right; replaying the graph again
    for the same step (a retry, a second launch) adds every split twice.  Expected:
    nondeterministic-replay on ``self.acc``.
    """

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.acc.zero_()

    def reset_acc(self, n: int) -> None:
        pass


class SplitKAccumulateNeverReset(SplitKAccumulate):
    """Buggy (unpersisted metadata): nothing resets the accumulator, neither the graph nor ``prepare``.

    How it happens: the zeroing was dropped as "the merge overwrites it anyway".  Every replay adds onto what the
    buffer held before the step (on graphsafe's graph instance, the poison it fills floating buffers with before each
    ``prepare``: NaN bit for bit, in every fresh instance of the diagnosis too).  Expected: unpersisted-metadata on
    ``self.acc``.
    """

    def reset_acc(self, n: int) -> None:
        pass


class LazyZeroedSplitK(SplitKAccumulate):
    """Buggy (lazy init): a Triton kernel zeroes the accumulator only if the step has not yet.

    How it happens: the zeroing kernel sits behind a have-initialised flag that ``prepare``
    clears; the warm-up zeroes and sets it, the capture skips the kernel, and every replay
    adds onto what the buffer held before.  Expected: lazy-init on ``self.acc``.
    """

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.acc_zeroed = False

    def reset_acc(self, n: int) -> None:
        if not self.acc_zeroed:
            _zero_rows[(n,)](self.acc, ROW=H * D)
            self.acc_zeroed = True


class LazyZeroedAccumulator(SplitAccumulate):
    """Buggy (lazy init): the plain-torch accumulator is zeroed only if the step has not yet.

    How it happens: as ``LazyZeroedSplitK``, with ``acc.zero_()`` behind the flag
    (``workspace.SplitAccumulate`` zeroes it every time).  Expected: lazy-init on ``self.acc``.
    """

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.acc_zeroed = False

    def reset_acc(self, n: int) -> None:
        if not self.acc_zeroed:
            self.acc[:n].zero_()
            self.acc_zeroed = True


# -- a work counter (Triton persistent kernel, mixed batches) ---------------------------------
@triton.jit
def _persistent_varlen(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    tok_req_ptr,
    tok_len_ptr,
    out_ptr,
    counter_ptr,
    num_rows,
    max_kv_blocks,
    bt_stride,
    scale,
    H: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
):
    """A fixed number of programs; each takes the next token row from ``counter`` until none is left."""
    h = tl.arange(0, H)
    d = tl.arange(0, D)
    row = tl.atomic_add(counter_ptr, 1)
    while row < num_rows:
        req = tl.load(tok_req_ptr + row)
        n_keys = tl.load(tok_len_ptr + row)
        out = _attend(q_ptr, k_ptr, v_ptr, bt_ptr, row, req, n_keys, max_kv_blocks, bt_stride, scale, H, D, BS)
        tl.store(out_ptr + (row * H + h[:, None]) * D + d[None, :], out)
        row = tl.atomic_add(counter_ptr, 1)


class TileCounter(VarlenAttention):
    """Safe: a persistent kernel (``PROGRAMS`` programs) takes token rows from an int32 work
    counter with ``atomic_add``; ``forward`` zeroes the counter first, inside the graph."""

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.counter = torch.zeros(1, dtype=torch.int32, device=self.device)

    def reset_counter(self) -> None:
        self.counter.zero_()

    def attention(self) -> None:
        self.reset_counter()
        _persistent_varlen[(PROGRAMS,)](
            self.q,
            self.k_flat,
            self.v_flat,
            self.block_table,
            self.token_req,
            self.tok_len,
            self.out,
            self.counter,
            self.num_rows,
            self.max_kv_blocks,
            self.block_table.stride(0),
            SCALE,
            H=H,
            D=D,
            BS=self.bs,
        )


class TileCounterResetAfter(TileCounter):
    """Safe: the graph zeroes the work counter after the persistent kernel, not before it.  The kernel reads the
    counter before anything in the graph writes it, but every replay hands it back as zero, so each starts from
    the zero the last one left (a persistent kernel whose last program resets its semaphore)."""

    def reset_counter(self) -> None:
        pass

    def attention(self) -> None:
        super().attention()
        self.counter.zero_()


class TileCounterInPrepare(TileCounter):
    """Buggy (nondeterministic replay): the work counter is reset by ``prepare``, not in the graph.

    How it happens: the host resets the persistent kernel's tile counter with the rest of the
    step's metadata.  The first replay after a ``prepare`` takes every row; a second replay
    of the same step finds the counter past the last row and writes nothing.  Expected:
    nondeterministic-replay on ``self.counter``.
    """

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.counter.zero_()

    def reset_counter(self) -> None:
        pass

"""Split-KV (flash-decoding) paged decode in Triton, and how it goes wrong.

Stage one: program ``(request, head, split)`` attends to its split of the request's keys
and writes an unnormalised partial ``(acc, max, sum)``; stage two merges the splits.
The split count is a host value (a grid dimension and a kernel scalar); the split
length is a host scalar or computed per request on the device.

``SplitKVDecode`` is safe: the split plan comes from ``spec.max_seq_len`` in ``setup``,
so the plan frozen at capture covers every later batch.  ``PlannedSplitKV`` is safe too:
a Triton planning kernel writes each split's key range into a scheduler buffer, inside the
captured region, with warm-up and captured state kept apart.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import graphsafe  # noqa: E402
from graphsafe import Batch, CaptureSpec, Support  # noqa: E402

from ._common import SCALE, D, H, PagedTarget, padded_table, write_rows  # noqa: E402

SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=16, block_size=4)
MAX_SPLITS = 4
MIN_SPLIT_LEN = 4
NEG = tl.constexpr(-1e30)  # "no key yet": finite, so empty splits merge without inf - inf


def split_plan(max_seq_len: int) -> tuple[int, int]:
    """``(num_splits, split_len)``: at most MAX_SPLITS splits of at least MIN_SPLIT_LEN keys."""
    n = max(1, min(MAX_SPLITS, triton.cdiv(max_seq_len, MIN_SPLIT_LEN)))
    return n, triton.cdiv(max_seq_len, n)


@triton.jit
def _split_stage1(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    lens_ptr,
    start_ptr,
    end_ptr,
    acc_ptr,
    ml_ptr,
    split_len,
    num_splits,
    bt_stride,
    scale,
    H: tl.constexpr,
    D: tl.constexpr,
    BS: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    RANGE: tl.constexpr,
):
    # one program per (request, split), all heads at once
    # RANGE 0: split s covers [s * split_len, ...) with the host split_len
    # RANGE 1: split_len = cdiv(seq_len, num_splits), computed here per request
    # RANGE 2: [start, end) read from the scheduler buffers a planning kernel wrote
    r = tl.program_id(0)
    s = tl.program_id(1)
    seq_len = tl.load(lens_ptr + r)
    if RANGE == 2:
        start = tl.load(start_ptr + r * MAX_SPLITS + s)
        end = tl.load(end_ptr + r * MAX_SPLITS + s)
    else:
        if RANGE == 1:
            split_len = (seq_len + num_splits - 1) // num_splits
        start = s * split_len
        end = tl.minimum(start + split_len, seq_len)
    h = tl.arange(0, H)
    d = tl.arange(0, D)
    offs = tl.arange(0, BS)
    q = tl.load(q_ptr + (r * H + h[:, None]) * D + d[None, :])  # [H, D]
    m = tl.full([H], NEG, tl.float32)
    l = tl.zeros([H], tl.float32)
    acc = tl.zeros([H, D], tl.float32)
    for k0 in range(start, end, BS):
        pos = k0 + offs
        mask = pos < end
        blk = tl.load(bt_ptr + r * bt_stride + pos // BS, mask=mask, other=0)
        slot = blk * BS + pos % BS
        kv_off = (slot[:, None, None] * H + h[None, :, None]) * D + d[None, None, :]  # [BS, H, D]
        k = tl.load(k_ptr + kv_off, mask=mask[:, None, None], other=0.0)
        v = tl.load(v_ptr + kv_off, mask=mask[:, None, None], other=0.0)
        sc = tl.where(mask[:, None], tl.sum(k * q[None, :, :], axis=2) * scale, NEG)  # [BS, H]
        m_new = tl.maximum(m, tl.max(sc, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.where(mask[:, None], tl.exp(sc - m_new[None, :]), 0.0)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v, axis=0)
        m = m_new
    base = (r * H + h) * MAX_SPLITS + s  # [H]
    tl.store(acc_ptr + base[:, None] * D + d[None, :], acc)
    tl.store(ml_ptr + base * 2, m)
    tl.store(ml_ptr + base * 2 + 1, l)


@triton.jit
def _split_stage2(acc_ptr, ml_ptr, out_ptr, num_splits, H: tl.constexpr, D: tl.constexpr, MAX_SPLITS: tl.constexpr):
    r = tl.program_id(0)
    h = tl.arange(0, H)
    d = tl.arange(0, D)
    base = (r * H + h) * MAX_SPLITS  # [H]
    m_all = tl.load(ml_ptr + base * 2)
    for s in range(1, num_splits):
        m_all = tl.maximum(m_all, tl.load(ml_ptr + (base + s) * 2))
    l_all = tl.zeros([H], tl.float32)
    acc = tl.zeros([H, D], tl.float32)
    for s in range(0, num_splits):
        w = tl.exp(tl.load(ml_ptr + (base + s) * 2) - m_all)
        l_all += w * tl.load(ml_ptr + (base + s) * 2 + 1)
        acc += w[:, None] * tl.load(acc_ptr + (base[:, None] + s) * D + d[None, :])
    ok = l_all > 0
    out = tl.where(ok[:, None], acc / tl.where(ok, l_all, 1.0)[:, None], 0.0)
    tl.store(out_ptr + (r * H + h[:, None]) * D + d[None, :], out)


@triton.jit
def _plan_splits(lens_ptr, start_ptr, end_ptr, num_splits, MAX_SPLITS: tl.constexpr):
    """Scheduler metadata: the key range ``[start, end)`` of every split of request ``r``."""
    r = tl.program_id(0)
    seq_len = tl.load(lens_ptr + r)
    split_len = (seq_len + num_splits - 1) // num_splits
    s = tl.arange(0, MAX_SPLITS)
    start = tl.minimum(s * split_len, seq_len)
    end = tl.minimum(start + split_len, seq_len)
    use = s < num_splits
    tl.store(start_ptr + r * MAX_SPLITS + s, tl.where(use, start, 0))
    tl.store(end_ptr + r * MAX_SPLITS + s, tl.where(use, end, 0))


class SplitKVDecode(PagedTarget):
    """Safe: split count and split length from the spec's worst case, fixed in ``setup``."""

    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = SPEC
    RANGE = 0

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        R = spec.max_reqs
        self.seq_lens = torch.zeros(R, dtype=torch.int32, device=self.device)
        self.block_table = torch.zeros(R, self.bps, dtype=torch.int32, device=self.device)
        # partials (workspace): written by stage one before stage two reads them
        self.part_acc = torch.zeros(R, H, MAX_SPLITS, D, device=self.device)
        self.part_ml = torch.zeros(R, H, MAX_SPLITS, 2, device=self.device)
        self.out = torch.zeros(R, H, D, device=self.device)
        self.num_splits, self.split_len = split_plan(spec.max_seq_len)

    def prepare(self, batch: Batch) -> None:
        self.set_sizes(batch)
        self.write_inputs(batch)
        write_rows(self.seq_lens, list(batch.seq_lens), 0)
        write_rows(self.block_table, padded_table(batch, self.bps), 0)

    def split_ranges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, end) buffers for RANGE 2; unused (any int32 tensor) otherwise."""
        return self.seq_lens, self.seq_lens

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
        _split_stage2[(n,)](self.part_acc, self.part_ml, self.out, self.num_splits, H=H, D=D, MAX_SPLITS=MAX_SPLITS)
        return self.out[:n].reshape(n, H * D)


class SplitCountFromBatch(SplitKVDecode):
    """Buggy (frozen host value): split count and split length from this batch's ``max_seq_len``.

    How it happens: the wrapper sizes the split grid for the batch at hand (fewer splits for
    short batches is faster) and passes ``split_len`` as a kernel scalar; nothing on the
    device recomputes the ranges.  Captured with a short batch, the graph covers only
    ``num_splits * split_len`` keys of every later, longer batch (vLLM #42885's
    ``num_kv_splits``, #20301 FA3 ``num_splits``).  The worst-case capture happens to be
    right; a drawn, smaller capture is not.  Expected: frozen-host-value.
    """

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.num_splits, self.split_len = split_plan(batch.max_seq_len)


class SplitCountFromBatchDeviceLen(SplitKVDecode):
    """Safe (up to rounding): the host split count follows the batch, each split's length is
    computed on the device from the request's own ``seq_len``.

    Whatever split count the graph froze, the splits cover each request's keys exactly, so
    a graph captured with 1 split and a batch run eagerly with 4 agree up to floating-point
    rounding of the merge (the "4b" case: a frozen host value that does not matter).
    Expected: no error finding.
    """

    RANGE = 1

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.num_splits = split_plan(batch.max_seq_len)[0]


# -- lazy-init -------------------------------------------------------------------------------
class _SchedulerState:
    """Scheduler metadata for one graph or for eager runs (FlashMLA's tile-scheduler metadata)."""

    def __init__(self, max_reqs: int, device):
        self.split_start = torch.zeros(max_reqs, MAX_SPLITS, dtype=torch.int32, device=device)
        self.split_end = torch.zeros(max_reqs, MAX_SPLITS, dtype=torch.int32, device=device)
        self.have_plan = False


class PlannedSplitKV(SplitKVDecode):
    """Safe: a planning kernel writes each split's key range; stage one trusts the plan.

    The plan is made lazily, on the first ``forward`` after ``prepare`` invalidated it.
    Warm-up and capture use separate state (``graphsafe.capturing()``; vLLM's fix
    ``AttentionStatePair`` for #44253), so the capture records the planner and every replay
    re-plans for its batch.
    """

    RANGE = 2

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.eager_state = _SchedulerState(spec.max_reqs, self.device)
        self.graph_state = _SchedulerState(spec.max_reqs, self.device)

    def state(self) -> _SchedulerState:
        return self.graph_state if graphsafe.capturing() else self.eager_state

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.eager_state.have_plan = False  # new batch: the plan must be made again
        self.graph_state.have_plan = False

    def split_ranges(self):
        st = self.state()
        if not st.have_plan:
            _plan_splits[(self.num_slots,)](
                self.seq_lens, st.split_start, st.split_end, self.num_splits, MAX_SPLITS=MAX_SPLITS
            )
            st.have_plan = True
        return st.split_start, st.split_end


class LazyPlannedSplitKV(PlannedSplitKV):
    """Buggy (lazy init): one scheduler state shared by warm-up and capture.

    How it happens: the planning kernel sits behind a have-initialised flag.  The warm-up
    run before capture plans and sets the flag, so the capture skips the planner; every
    replay then uses the warm-up batch's key ranges (vLLM #44253, #42444).  Stage one
    trusts the ranges, so requests shorter than the warm-up's attend to keys past their
    end.  Expected: lazy-init.
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.graph_state = self.eager_state

"""``flashmla_lazy``: decode whose split schedule is planned lazily on first use (vLLM PR #44253).

FlashMLA plans its tile schedule (which split covers which keys) with a small kernel that
runs only when the step's attention state is not yet initialised.  The warm-up run before
capture already sets that flag, so if warm-up and capture share one state the capture
skips the planner: the graph then replays the warm-up's schedule for every later batch.
The fix keeps two states, one for warm-up and one for capture, so the captured forward
finds its state uninitialised and records the planner.

Data flow: ``prepare`` writes ``seq_lens``, the block table and the queries, and marks the
states uninitialised (a new step).  ``forward``: if the state is not initialised, the
planner kernel reads ``seq_lens`` on the device and writes per-request split boundaries
and split counts (int32) into the state; then the split-KV kernels attend over exactly the
planned ranges, without looking at ``seq_lens`` again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..contract import Batch, CaptureSpec, Support, capturing
from ._common import LatentTarget, latent_attention, next_pow2, request_tensors, write_prefix

__all__ = ["FlashMLALazy", "FlashMLALazySharedState", "SchedulerState"]

MAX_SPLITS = 2
BLOCK_N = 32


@dataclass
class SchedulerState:
    """Per-step tile-scheduler metadata, planned lazily by the first forward of a step."""

    bounds: torch.Tensor  # [max_reqs, MAX_SPLITS + 1] int32: split s covers [bounds[s], bounds[s + 1])
    num_splits: torch.Tensor  # [max_reqs] int32
    have_initialized: bool = False

    @classmethod
    def allocate(cls, max_reqs: int, device) -> SchedulerState:
        return cls(
            torch.zeros(max_reqs, MAX_SPLITS + 1, dtype=torch.int32, device=device),
            torch.zeros(max_reqs, dtype=torch.int32, device=device),
        )


@triton.jit
def _plan_splits_kernel(
    seq_lens_ptr,
    bounds_ptr,  # [rows, MAX_SPLITS + 1]
    num_splits_ptr,
    MAX_SPLITS: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """One program per request: cut [0, seq_len) into up to MAX_SPLITS page-aligned chunks."""
    r = tl.program_id(0)
    seq = tl.load(seq_lens_ptr + r)
    pages = (seq + PAGE - 1) // PAGE
    used = tl.minimum(pages, MAX_SPLITS)
    chunk = (pages + tl.maximum(used, 1) - 1) // tl.maximum(used, 1) * PAGE
    offs = tl.arange(0, BLOCK_S)
    tl.store(bounds_ptr + r * (MAX_SPLITS + 1) + offs, tl.minimum(offs * chunk, seq), mask=offs < MAX_SPLITS + 1)
    tl.store(num_splits_ptr + r, used)


class FlashMLALazy(LatentTarget):
    """Fixed: separate warm-up and captured scheduler states, chosen with
    ``graphsafe.capturing()``, so the capture finds its state uninitialised and records the
    planner kernel (the ``AttentionStatePair`` pattern)."""

    name = "flashmla_lazy"
    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=64, block_size=16)

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.seq_lens = torch.zeros(spec.max_reqs, dtype=torch.int32, device=self.device)
        self.block_table = torch.zeros(spec.max_reqs, spec.blocks_per_seq, dtype=torch.int32, device=self.device)
        self.warmup_state = SchedulerState.allocate(spec.max_reqs, self.device)
        self.captured_state = SchedulerState.allocate(spec.max_reqs, self.device)
        self.planner_runs = 0  # host-side count, for tests and curiosity

    def states(self) -> list[SchedulerState]:
        return [self.warmup_state, self.captured_state]

    def current_state(self) -> SchedulerState:
        return self.captured_state if capturing() else self.warmup_state

    def prepare(self, batch: Batch) -> None:
        self.num_slots = batch.num_slots
        seq_lens, _, table = request_tensors(batch, self.spec)
        write_prefix(self.seq_lens, seq_lens.to(self.device))
        write_prefix(self.block_table, table.to(self.device))
        self.write_queries(batch)
        for state in self.states():
            state.have_initialized = False  # a new step: plan again

    def forward(self):
        T, page = self.num_slots, self.spec.block_size
        state = self.current_state()
        if not state.have_initialized:
            _plan_splits_kernel[(T,)](
                self.seq_lens,
                state.bounds,
                state.num_splits,
                MAX_SPLITS=MAX_SPLITS,
                PAGE=page,
                BLOCK_S=next_pow2(MAX_SPLITS + 1),
            )
            state.have_initialized = True
            self.planner_runs += 1
        # Key ranges come from the plan alone (not from seq_lens).
        return latent_attention(
            self,
            rows=T,
            num_splits=MAX_SPLITS,
            block_table=self.block_table,
            bounds=state.bounds,
            used_splits=state.num_splits,
            block_n=BLOCK_N,
        )


class FlashMLALazySharedState(FlashMLALazy):
    """Buggy: warm-up and capture share one state.

    The warm-up forward plans and sets ``have_initialized``; the captured forward skips the
    planner, so the graph holds only the attention kernels, and every replay reads the
    warm-up batch's split boundaries.
    """

    name = "flashmla_lazy:shared_state"
    expected = "lazy-init"

    def states(self) -> list[SchedulerState]:
        return [self.warmup_state]

    def current_state(self) -> SchedulerState:
        return self.warmup_state

"""Small synthetic targets: one per finding kind, each with a safe twin.

They share one tiny backend: per token, ``out = x * scale(request)`` where the
scale is the request's sequence length read on the device.  Each unsafe
variant changes one thing, the way real backends went wrong.  ``EXPECTED``
maps each class to the finding kind and the path or argument the checker must
name (``None`` for safe twins).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import graphsafe
from graphsafe import Batch, CaptureSpec, Support, Target

SPEC = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=16, block_size=4)
D = 4


@triton.jit
def _scale_rows(x_ptr, s_ptr, out_ptr, D: tl.constexpr):
    """out[t, :] = x[t, :] * s[t]  (one program per token slot)."""
    t = tl.program_id(0)
    cols = tl.arange(0, D)
    s = tl.load(s_ptr + t)
    x = tl.load(x_ptr + t * D + cols)
    tl.store(out_ptr + t * D + cols, x * s)


@triton.jit
def _scale_rows_host(x_ptr, out_ptr, scale, D: tl.constexpr):
    """out[t, :] = x[t, :] * scale with a host scalar (frozen at capture)."""
    t = tl.program_id(0)
    cols = tl.arange(0, D)
    x = tl.load(x_ptr + t * D + cols)
    tl.store(out_ptr + t * D + cols, x * scale)


def token_lens(batch: Batch) -> list[float]:
    return [float(s) for s, q in zip(batch.seq_lens, batch.query_lens) for _ in range(q)]


class Safe(Target):
    """Safe: persistent buffers sized for the spec, written with copy_ in prepare, padding zeroed."""

    support = Support.ALWAYS
    default_spec = SPEC

    def setup(self, spec, device):
        t = spec.max_reqs * spec.max_query_len
        self.x = torch.zeros(t, D, device=device)
        self.lens = torch.zeros(t, device=device)
        self.w = torch.zeros(D, device=device)
        self.out = torch.zeros(t, D, device=device)

    def static(self):
        return {"w": self.w}

    def write_inputs(self, batch: Batch) -> None:
        n = batch.num_tokens
        self.x[:n] = graphsafe.seeded((n, D), seed=batch.seed, device=self.x.device)
        self.x[n:] = 0
        self.lens[:n] = torch.tensor(token_lens(batch), device=self.x.device)
        self.lens[n:] = 0

    def prepare(self, batch):
        self.write_inputs(batch)

    def forward(self):
        _scale_rows[(self.x.shape[0],)](self.x, self.lens, self.out, D=D)
        torch.add(self.out, self.w, out=self.out)
        return self.out


# -- capture-failure --------------------------------------------------------------------------
class HostSync(Safe):
    """Unsafe: reads a value produced inside the graph back to the host."""

    def forward(self):
        out = super().forward()
        total = (self.lens * 2).sum().item()  # graph data -> host: cannot be captured
        return out * (1.0 if total >= 0 else 2.0)


# -- stale-pointer ----------------------------------------------------------------------------
class FreshLens(Safe):
    """Unsafe: prepare rebinds ``self.lens`` to a new tensor every step; the captured one is freed."""

    def prepare(self, batch):
        self.lens = torch.zeros_like(self.lens)
        self.write_inputs(batch)


# -- unpersisted-metadata ---------------------------------------------------------------------
class NewMetadata(Safe):
    """Unsafe: new metadata every step; the captured tensor stays alive in a history, never updated."""

    def setup(self, spec, device):
        super().setup(spec, device)
        self.history = []

    def prepare(self, batch):
        self.history.append(self.lens)
        self.lens = torch.zeros_like(self.lens)
        self.write_inputs(batch)


# -- lazy-init --------------------------------------------------------------------------------
class _State:
    def __init__(self, t, device):
        self.planned = False
        self.plan = torch.zeros(t, device=device)


class LazyPlan(Safe):
    """Unsafe: a planning step behind a have-initialized flag, shared by warm-up and capture."""

    def setup(self, spec, device):
        super().setup(spec, device)
        t = self.x.shape[0]
        self.warm = _State(t, device)
        self.captured = self.warm

    def state(self) -> _State:
        return self.captured if graphsafe.capturing() else self.warm

    def prepare(self, batch):
        self.write_inputs(batch)
        self.warm.planned = False
        self.captured.planned = False

    def forward(self):
        st = self.state()
        if not st.planned:
            torch.mul(self.lens, 2.0, out=st.plan)  # the "planning kernel"
            st.planned = True
        _scale_rows[(self.x.shape[0],)](self.x, st.plan, self.out, D=D)
        torch.add(self.out, self.w, out=self.out)
        return self.out


class LazyPlanSeparate(LazyPlan):
    """Safe twin: separate warm-up and captured state, so capture records the planning step."""

    def setup(self, spec, device):
        super().setup(spec, device)
        self.captured = _State(self.x.shape[0], device)


# -- frozen-host-value ------------------------------------------------------------------------
class HostScale(Safe):
    """Unsafe: a scale computed from the batch on the host and passed to the kernel as a scalar."""

    def prepare(self, batch):
        self.write_inputs(batch)
        self.scale = float(batch.max_seq_len)

    def forward(self):
        _scale_rows_host[(self.x.shape[0],)](self.x, self.out, self.scale, D=D)
        torch.add(self.out, self.w, out=self.out)
        return self.out


class DeviceScale(HostScale):
    """Safe twin: the same scale, read on the device from a persistent buffer."""

    def setup(self, spec, device):
        super().setup(spec, device)
        self.scale_t = torch.zeros(self.x.shape[0], device=device)

    def prepare(self, batch):
        self.write_inputs(batch)
        self.scale_t.fill_(float(batch.max_seq_len))

    def forward(self):
        _scale_rows[(self.x.shape[0],)](self.x, self.scale_t, self.out, D=D)
        torch.add(self.out, self.w, out=self.out)
        return self.out


# -- stale-padding ----------------------------------------------------------------------------
class Normalised(Safe):
    """Safe: output normalised by a batch-wide sum over all slots (padding contributes 0)."""

    def forward(self):
        _scale_rows[(self.x.shape[0],)](self.x, self.lens, self.out, D=D)
        total = self.lens.sum().clamp_min(1.0)
        torch.div(self.out, total, out=self.out)
        return self.out


class StaleTail(Normalised):
    """Unsafe: prepare leaves the tail of ``lens`` from an earlier, larger batch; the sum reads it."""

    def prepare(self, batch):
        n = batch.num_tokens
        self.x[:n] = graphsafe.seeded((n, D), seed=batch.seed, device=self.x.device)
        self.x[n:] = 0
        self.lens[:n] = torch.tensor(token_lens(batch), device=self.x.device)


# -- output-not-written -----------------------------------------------------------------------
class EagerOnlyWrite(Safe):
    """Unsafe: forward writes its output only when not capturing (the graph writes nothing)."""

    def forward(self):
        if not graphsafe.capturing():
            _scale_rows[(self.x.shape[0],)](self.x, self.lens, self.out, D=D)
            torch.add(self.out, self.w, out=self.out)
        return self.out


# -- nondeterministic-replay ------------------------------------------------------------------
class Counter(Safe):
    """Unsafe: every replay bumps a device counter that feeds the output."""

    def setup(self, spec, device):
        super().setup(spec, device)
        self.calls = torch.zeros(1, dtype=torch.int64, device=device)

    def forward(self):
        self.calls.add_(1)
        _scale_rows[(self.x.shape[0],)](self.x, self.lens, self.out, D=D)
        torch.add(self.out, self.calls, out=self.out)
        return self.out


# -- the checker's own pitfalls ---------------------------------------------------------------
class SharedOutput(HostScale):
    """Unsafe: every instance writes one module-level output buffer (graph and eager alias)."""

    OUT: dict = {}

    def setup(self, spec, device):
        super().setup(spec, device)
        key = str(device)
        if key not in SharedOutput.OUT:
            SharedOutput.OUT[key] = torch.zeros_like(self.out)
        self.out = SharedOutput.OUT[key]


class SharedOutputWritesNothing(SharedOutput):
    """Unsafe: shared output written only eagerly: after an eager run it already holds right values."""

    def forward(self):
        if not graphsafe.capturing():
            return super().forward()
        return self.out


class Recording(Safe):
    """Safe: records every batch prepare() sees and the inputs present at each replay."""

    SEEN: list = []

    def prepare(self, batch):
        Recording.SEEN.append((batch.seed, graphsafe.capturing()))
        super().prepare(batch)


EXPECTED = {
    HostSync: ("capture-failure", "forward"),
    FreshLens: ("stale-pointer", "self.lens"),
    NewMetadata: ("unpersisted-metadata", "self.lens"),
    LazyPlan: ("lazy-init", "self.warm.plan"),
    HostScale: ("frozen-host-value", "_scale_rows_host.scale"),
    StaleTail: ("stale-padding", "self.lens"),
    EagerOnlyWrite: ("output-not-written", "output[0]"),
    Counter: ("nondeterministic-replay", "output[0]"),
}
TWINS = [Safe, LazyPlanSeparate, DeviceScale, Normalised]

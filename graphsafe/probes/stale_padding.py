"""stale-padding: live rows or persistent state depend on padded slots.

The example's steps are re-run eagerly, without a graph, with the same padding
and poisoning as the graph instance.  If that reproduces the difference, the
padding is at fault, not the capture.  A second eager run of only the failing
step on a fresh instance tells stale padding left by an earlier, larger batch
(named by the buffers that differ) from padded slots that break live rows by
themselves (seq_len 0 giving NaN through a batch-wide reduction).
"""

from __future__ import annotations

import torch

from ..capture.context import StepContext
from ..findings import Finding, FindingKind

KIND = FindingKind.STALE_PADDING
STAGE = "diagnose"


def _stale_buffers(hist, fresh) -> list[str]:
    out = []
    for path, t in hist.buffers_after_prepare.items():
        f = fresh.buffers_after_prepare.get(path)
        if f is None or f.shape != t.shape or f.dtype != t.dtype or t.numel() == 0:
            continue
        if t.dtype.is_floating_point:
            bad = ~((t == f) | (t.isnan() & f.isnan()))
        else:
            bad = t != f
        if bool(bad.any()):
            out.append(path + _rows(bad))
    return out


def _rows(bad: torch.Tensor) -> str:
    if bad.dim() == 0:
        return ""
    rows = bad.reshape(bad.shape[0], -1).any(dim=1).nonzero().reshape(-1)
    return f"[{int(rows.min())}:{int(rows.max()) + 1}]" if rows.numel() else ""


def _input_paths(ctx) -> set[str]:
    """Attribute paths of buffers the graph reads and does not write itself."""
    info = ctx.info
    return {
        p
        for key in ctx.graph.recording.external
        if key not in info.graph_written and key not in ctx.session.static_keys
        for p in info.paths.get(key, [])
    }


def _unwritten_buffers(ctx, fresh) -> list[str]:
    """Input buffers that prepare left (partly) unwritten: NaN poison survives past the batch."""
    inputs = _input_paths(ctx)
    out = []
    for path, t in fresh.buffers_after_prepare.items():
        if path in inputs and t.dtype.is_floating_point and bool(t.isnan().any()):
            out.append(path + _rows(t.isnan()))
    return out


def run(ctx: StepContext) -> Finding | None:
    ev = ctx.evidence
    hist_m = ev.scratch_mismatches(ev.scratch)
    if not hist_m:
        return None
    padded = ctx.padded[-1]
    slots = (
        f"slots {padded.num_reqs}..{padded.num_slots - 1} and token rows past {padded.num_tokens}"
        if padded.is_padded
        else f"token rows past this batch's {padded.num_tokens} tokens"
    )
    fresh_m = ev.scratch_mismatches(ev.fresh_scratch)
    m = hist_m[0]
    if fresh_m:
        msg = (
            f"padding ({slots}) changes live results even without history: {m.tensor} differs "
            f"({m.count}/{m.total}, max abs {m.max_abs:.3g}) when the same batch runs padded"
        )
        stale = _unwritten_buffers(ctx, ev.fresh_scratch)
        if stale:
            msg += f"; prepare() leaves {', '.join(stale[:4])} unwritten (poisoned) past this batch"
        where = stale[0].split("[")[0] if stale else m.tensor
    else:
        stale = _stale_buffers(ev.scratch, ev.fresh_scratch)
        msg = (
            f"after an earlier, larger batch, the padding ({slots}) keeps stale values"
            + (f" in {', '.join(stale[:4])}" if stale else "")
            + f"; {m.tensor} differs ({m.count}/{m.total}, max abs {m.max_abs:.3g})"
        )
        where = stale[0].split("[")[0] if stale else m.tensor
    return Finding(kind=KIND, message=msg, where=where, details={"stale_buffers": stale}, mismatches=hist_m)

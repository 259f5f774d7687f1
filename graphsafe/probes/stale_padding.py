"""stale-padding: live rows or persistent state depend on padded slots.

Stage ``diagnose``.  The example's steps are re-run eagerly, without a graph, with the same padding
and poisoning as the graph instance.  If that reproduces the difference, the graph is not at fault.
A second eager run of only the failing step on a fresh instance tells the two padding hazards apart:

* it differs too: padded slots break live rows by themselves (seq_len 0 giving NaN through a
  batch-wide reduction);
* it does not: the difference needs the instance's history.  That is stale padding only when padding
  alone explains it: the buffers the graph reads differ from the fresh run's in padded rows (past this
  batch's live requests) and nowhere else.  A difference in live rows (a plan kept from warm-up, an
  accumulator never reset) is another cause, and this probe does not claim it.
"""

from __future__ import annotations

import torch

from ..capture.context import StepContext
from ..findings import Finding, FindingKind

KIND = FindingKind.STALE_PADDING
STAGE = "diagnose"


def _differing_rows(hist, fresh, paths: set[str]) -> dict[str, tuple[int, int]]:
    """Buffer path -> (first, last) row where the history run's buffer differs from the fresh run's."""
    out = {}
    for path, t in hist.buffers_after_prepare.items():
        f = fresh.buffers_after_prepare.get(path)
        if path not in paths or f is None or f.shape != t.shape or f.dtype != t.dtype or t.numel() == 0:
            continue
        bad = ~((t == f) | (t.isnan() & f.isnan())) if t.dtype.is_floating_point else t != f
        if bool(bad.any()):
            out[path] = _row_span(bad)
    return out


def _row_span(bad: torch.Tensor) -> tuple[int, int]:
    if bad.dim() == 0:
        return (0, 0)
    rows = bad.reshape(bad.shape[0], -1).any(dim=1).nonzero().reshape(-1)
    return (int(rows.min()), int(rows.max())) if rows.numel() else (0, 0)


def _rows(bad: torch.Tensor) -> str:
    if bad.dim() == 0:
        return ""
    first, last = _row_span(bad)
    return f"[{first}:{last + 1}]" if bool(bad.any()) else ""


def _input_paths(ctx) -> set[str]:
    """Attribute paths of buffers the graph reads and does not write itself."""
    info = ctx.info
    return {
        p
        for key in ctx.graph.recording.external
        if key not in info.graph_written and key not in ctx.session.static_keys
        for p in info.paths.get(key, [])
    }


def _unwritten_rows(ctx, fresh) -> dict[str, tuple[int, int]]:
    """Input buffers that prepare left (partly) unwritten, by the rows where the NaN poison survives."""
    inputs = _input_paths(ctx)
    return {
        path: _row_span(t.isnan())
        for path, t in fresh.buffers_after_prepare.items()
        if path in inputs and t.dtype.is_floating_point and bool(t.isnan().any())
    }


def _unwritten_buffers(ctx, fresh) -> list[str]:
    """Input buffers that prepare left (partly) unwritten, named with the rows (``self.lens[1:2]``)."""
    return [f"{path}[{first}:{last + 1}]" for path, (first, last) in _unwritten_rows(ctx, fresh).items()]


def run(ctx: StepContext) -> Finding | None:
    ev = ctx.evidence
    hist_m = ev.scratch_mismatches(ev.scratch)
    if not hist_m:
        ev.note(KIND.value, "an eager run of the example's padded steps (same poison, no graph) agrees with eager")
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
        unwritten = _unwritten_rows(ctx, ev.fresh_scratch)
        if unwritten:  # prepare() leaves input rows unwritten: padding only if they all lie past the live requests
            if any(first < padded.num_reqs for first, _ in unwritten.values()):
                ev.note(KIND.value, "prepare() leaves live rows of an input unwritten: not the padding")
                return None  # live rows unwritten: another cause (a planner, metadata written elsewhere)
        elif ev.scratch_mismatches(ev.fresh_unpadded_scratch):
            ev.note(KIND.value, "the eager re-run differs from eager unpadded as well: not the padding")
            return None  # the same step unpadded differs too: not the padding
        msg = (
            f"padding ({slots}) changes live results even without history: {m.tensor} differs "
            f"({m.count}/{m.total}, max abs {m.max_abs:.3g}) when the same batch runs padded"
        )
        stale = _unwritten_buffers(ctx, ev.fresh_scratch)
        if stale:
            msg += f"; prepare() leaves {', '.join(stale[:4])} unwritten (poisoned) past this batch"
        where = stale[0].split("[")[0] if stale else m.tensor
    else:
        differing = _differing_rows(ev.scratch, ev.fresh_scratch, _input_paths(ctx))
        if not differing or any(first < padded.num_reqs for first, _ in differing.values()):
            ev.note(
                KIND.value,
                "the example's history changes live rows of the inputs, or none the graph reads: not padding alone",
            )
            return None  # history changed live rows, or nothing the graph reads: not padding alone
        stale = [f"{path}[{first}:{last + 1}]" for path, (first, last) in differing.items()]
        msg = (
            f"after an earlier, larger batch, the padding ({slots}) keeps stale values in {', '.join(stale[:4])}"
            f"; {m.tensor} differs ({m.count}/{m.total}, max abs {m.max_abs:.3g})"
        )
        where = stale[0].split("[")[0]
    cause = f"buffer:{where}" if stale else f"output:{m.tensor}"
    return Finding(
        kind=KIND, message=msg, where=where, details={"stale_buffers": stale}, mismatches=hist_m, cause=cause
    )

"""stale-padding: live rows or persistent state depend on padded slots.

Stage ``diagnosis``.  The example's steps are re-run eagerly, without a graph, with the same padding
and poisoning as the graph instance.  If that reproduces the difference, the graph is not at fault.
A second eager run of only the failing step on a fresh instance tells the two padding hazards apart:

* it differs too: padded slots break live rows by themselves (seq_len 0 giving NaN through a
  batch-wide reduction, a padded row writing into a live page), unless the same step *unpadded* on a fresh
  instance differs as well (then live rows are at fault: no claim; poison prepare() leaves only past the live
  requests is the padding's either way); where the graph is that padded eager run and both are within the output dtype's
  rounding bound of eager, the padded batch only took another kernel or split (a reduction in another order):
  ``info``, numerics only;
* it does not: the difference needs the instance's history.  That is stale padding only when padding
  alone explains it: the buffers the graph reads differ from the fresh run's in padded rows (past this
  batch's live requests) and nowhere else, and the replay comes out otherwise once those rows hold the fresh
  run's values (:func:`graphsafe.diagnosis.padding.rows_matter`: rows past the live requests that no replay
  reads, such as a flat index array's tail past this batch's pages, are no cause).  A difference in live rows (a
  plan kept from warm-up, an accumulator never reset) is another cause, and this probe does not claim it.

Stale padding can also make the graph race with itself: a padded row that keeps an earlier batch's cache slot
writes there in the same launch as the live row that owns the slot now, and which write lands is undefined.
Two replays of one batch then differ, which the ``nondeterministic-replay`` probe sees first; it asks
:func:`graphsafe.diagnosis.padding.race` whether the replays agree once the padded rows hold what a fresh instance's ``prepare()`` writes
there, and reports this kind when they do.
"""

from __future__ import annotations

from ...findings import Finding, FindingKind
from ..context import StepContext
from ..frozen import beyond_bound
from ..padding import (
    differing_rows,
    input_paths,
    padding_alone,
    padding_slots,
    rows_matter,
    unwritten_buffers,
    unwritten_rows,
)

KIND = FindingKind.STALE_PADDING
STAGE = "diagnosis"


def run(ctx: StepContext) -> Finding | None:
    ev = ctx.evidence
    hist_m = ev.scratch_mismatches(ev.scratch)
    if not hist_m:
        ev.note(KIND.value, "an eager run of the example's padded steps (same poison, no graph) agrees with eager")
        return None
    padded = ctx.padded[-1]
    slots = padding_slots(padded)
    fresh_m = ev.scratch_mismatches(ev.fresh_scratch)
    m = hist_m[0]
    if fresh_m:
        unwritten = unwritten_rows(ctx, ev.fresh_scratch)
        # poison prepare() leaves only past the live requests is the padding's, even where the unpadded run reads
        # it too (a batch-wide reduction over a fixed buffer); else the same step unpadded decides: where it
        # differs as well, the padding is not the cause (live rows left unwritten and read, a planner), and where it
        # agrees, poison in live rows was never read (a library kernel's output or workspace, written first)
        past_only = bool(unwritten) and all(first >= padded.num_reqs for first, _ in unwritten.values())
        if not past_only and ev.scratch_mismatches(ev.fresh_unpadded_scratch):
            live = [p for p, (first, _) in unwritten.items() if first < padded.num_reqs]
            why = f" (prepare() leaves live rows of {', '.join(live[:3])} unwritten)" if live else ""
            ev.note(KIND.value, f"the eager re-run differs from eager unpadded as well{why}: not the padding")
            return None  # the same step unpadded differs too: not the padding
        msg = (
            f"padding ({slots}) changes live results even without history: {m.tensor} differs "
            f"({m.count}/{m.total}, max abs {m.max_abs:.3g}) when the same batch runs padded"
        )
        note = _numerics_only(ctx)
        if note is not None:  # padding picks another kernel or split for the live rows: only their rounding moves
            return Finding(
                kind=KIND,
                message=msg + note,
                where=m.tensor,
                mismatches=hist_m,
                cause=f"output:{m.tensor}",
                severity="info",
                details={"numerics_only": True},
            )
        stale = unwritten_buffers(ctx, ev.fresh_scratch, past=padded.num_reqs)
        if stale:
            msg += f"; prepare() leaves {', '.join(stale[:4])} unwritten (poisoned) past this batch"
        where = stale[0].split("[")[0] if stale else m.tensor
    else:
        differing = differing_rows(
            ev.scratch.buffers_after_prepare, ev.fresh_scratch.buffers_after_prepare, input_paths(ctx)
        )
        past, proof = padding_alone(differing, padded.num_reqs, input_paths(ctx, recorded=True))
        if not past or proof:  # nothing past the live requests, or live rows a recorded launch reads: another cause
            seen = ", ".join(f"{p}[{a}:{b + 1}]" for p, (a, b) in differing.items() if p in proof) or "none"
            ev.note(
                KIND.value,
                "the example's history changes no input past this batch's requests, or live rows of one a recorded "
                f"launch reads ({seen}): not padding alone",
            )
            return None  # history changed live rows, or nothing the graph reads: not padding alone
        if not rows_matter(ctx, past, ev.fresh_scratch.buffers_after_prepare):
            ev.note(
                KIND.value,
                "after the example's history, "
                + ", ".join(f"{p}[{a}:{b + 1}]" for p, (a, b) in list(past.items())[:4])
                + " differ from a fresh instance's past the live requests, but the replay comes out the same bit for "
                "bit with the fresh values there: not what the graph reads",
            )
            return None  # rows no replay reads (a flat array's tail past this batch's pages): not the cause
        stale = [f"{path}[{first}:{last + 1}]" for path, (first, last) in past.items()]
        msg = (
            f"after an earlier, larger batch, the padding ({slots}) keeps stale values in {', '.join(stale[:4])}"
            f"; {m.tensor} differs ({m.count}/{m.total}, max abs {m.max_abs:.3g})"
        )
        where = stale[0].split("[")[0]
    cause = f"buffer:{where}" if stale else f"output:{m.tensor}"
    return Finding(
        kind=KIND, message=msg, where=where, details={"stale_buffers": stale}, mismatches=hist_m, cause=cause
    )


def _numerics_only(ctx: StepContext) -> str | None:
    """The info note when padding changes only the rounding of live rows (a kernel or split chosen from the padded
    batch's shape: the same reduction in another order), else None: the graph equals the padded eager run of the
    example (padding is the whole difference), and both are within the dtype's bound of eager
    (:func:`~graphsafe.diagnosis.frozen.numerics_bound`).  Never with bitwise tolerance, and never for a static
    tensor: padded slots that write state are stale padding whatever the size of the change."""
    if ctx.comparator.tolerance.bitwise or any(m.tensor.startswith("static[") for m in ctx.mismatches):
        return None
    run = ctx.evidence.scratch
    if ctx.comparator.step(ctx.graph_live, run.live, {}, {}, ctx.batch):
        return None  # the graph is not the padded eager run: something besides the padding
    if beyond_bound(ctx, ctx.graph_live, {}) or beyond_bound(ctx, run.live, {}):
        return None
    worst = max(ctx.mismatches, key=lambda x: x.max_abs)
    return (
        f"; numerics only: the graph equals an eager run of the same padded steps, and both differ from eager by at "
        f"most {worst.max_abs:.3g} (relative {worst.max_rel:.3g}) in {worst.tensor}, within the output dtype's "
        "resolution (or TF32 rounding for fp32 on a GPU): the padded batch takes another kernel or split; use "
        "Tolerance(bitwise=True) where results must not depend on padding"
    )

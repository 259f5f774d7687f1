"""stale-padding: live rows or persistent state depend on padded slots.

Stage ``diagnosis``.  The example's steps are re-run eagerly, without a graph, with the same padding
and poisoning as the graph instance.  If that reproduces the difference, the graph is not at fault.
A second eager run of only the failing step on a fresh instance tells the two padding hazards apart:

* it differs too: padded slots break live rows by themselves (seq_len 0 giving NaN through a
  batch-wide reduction);
* it does not: the difference needs the instance's history.  That is stale padding only when padding
  alone explains it: the buffers the graph reads differ from the fresh run's in padded rows (past this
  batch's live requests) and nowhere else.  A difference in live rows (a plan kept from warm-up, an
  accumulator never reset) is another cause, and this probe does not claim it.

Stale padding can also make the graph race with itself: a padded row that keeps an earlier batch's cache slot
writes there in the same launch as the live row that owns the slot now, and which write lands is undefined.
Two replays of one batch then differ, which the ``nondeterministic-replay`` probe sees first; it asks
:func:`graphsafe.diagnosis.padding.race` whether the replays agree once the padded rows hold what a fresh instance's ``prepare()`` writes
there, and reports this kind when they do.
"""

from __future__ import annotations

from ...findings import Finding, FindingKind
from ..context import StepContext
from ..padding import differing_rows, input_paths, padding_alone, padding_slots, unwritten_buffers, unwritten_rows

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
        stale = unwritten_buffers(ctx, ev.fresh_scratch)
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

"""nondeterministic-replay: two replays of the same prepared batch differ.

Stage ``step``, on the first step of every example (enough to see a race without doubling every
step): the graph replays the prepared batch twice, static state restored between the replays, and
the live outputs must be bitwise equal.  The second replay is the step's own (``ctx.replayed``): the
step compares it with eager instead of replaying a third time.  The restore copies back only what a
replay can change (:class:`~graphsafe.capture.statics.SavedStatics`): a large KV cache costs its
example's blocks.  Only when they differ, the buffers the graph both writes and reads before
writing (an accumulator or a work counter that only ``prepare`` resets) are looked for, by
replaying over two fills of each: the finding names the one that carries a replay into the next.
First, though, the replays may race through padded rows an earlier batch left behind: when they agree once
those rows hold fresh values, that is reported as ``stale-padding`` (:func:`graphsafe.diagnosis.padding.race`).
Those experiments re-run the step on fresh instances many times: while a search shrinks, two replays that differ
are only a :class:`~graphsafe.diagnosis.context.Symptom` (``ctx.symptom``; the probe returns None), explained where
the check first meets it and on the example that is left (``ctx.wants_diagnosis``).
"""

from __future__ import annotations

from ...capture.statewalk import paths_by_storage
from ...capture.statics import SavedStatics, static_dict
from ...findings import Finding, FindingKind
from ..carried import carried_inputs, written_inputs
from ..context import StepContext, Symptom
from ..padding import race

KIND = FindingKind.NONDETERMINISTIC_REPLAY
STAGE = "step"


def run(ctx: StepContext) -> Finding | None:
    if ctx.step_index != 0:
        return None
    saved = SavedStatics(static_dict(ctx.session.target), ctx.seed, ctx.region, ctx.comparator.paged)
    ctx.replayed, mism = ctx.replay_twice(saved)
    if not mism:
        return None
    m = mism[0]
    ctx.symptom = Symptom(f"replays differ: {m.tensor}", tuple(mism), ctx.step_index, of="replays")
    if not ctx.wants_diagnosis(ctx.symptom):  # shrinking: the example that is left is explained, once
        return None
    msg = f"two replays of one prepared batch differ in {m.tensor}: {m.count}/{m.total} values, max abs {m.max_abs:.3g}"
    padding, why = race(ctx, saved, mism)  # a race through padded rows an earlier batch left
    if padding is not None:
        return padding
    msg += f" (not stale padding: {why})"
    info = ctx.info
    carriers = carried_inputs(ctx, written_inputs(ctx))
    if not carriers:
        return Finding(
            kind=KIND,
            message=msg,
            where=m.tensor,
            mismatches=mism,
            cause=f"output:{m.tensor}",
            details={"padding": why},
        )
    paths = paths_by_storage(ctx.session.target)
    names = [", ".join(paths.get(k) or info.paths.get(k) or [hex(k)]) for k in carriers]
    msg += (
        f"; the graph reads and writes {', '.join(names)} and nothing in it resets that between replays: "
        "a replay starts from what the one before left (reset it inside forward())"
    )
    return Finding(
        kind=KIND,
        message=msg,
        where=names[0],
        mismatches=mism,
        details={"carried": names, "padding": why},
        cause="buffer:" + names[0].split(", ")[0],
    )

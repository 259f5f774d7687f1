"""nondeterministic-replay: two replays of the same prepared batch differ.

Stage ``step``, on the first step of every example (enough to see a race without doubling every
step): the graph replays the prepared batch twice, static state restored between the replays, and
the live outputs must be bitwise equal.  The second replay is the step's own (``ctx.replayed``): the
step compares it with eager instead of replaying a third time.  The restore copies back only what a
replay can change (:class:`~graphsafe.capture.statics.SavedStatics`): a large KV cache costs its
example's blocks.
"""

from __future__ import annotations

from ..capture.context import StepContext
from ..capture.statics import SavedStatics, static_dict
from ..findings import Finding, FindingKind

KIND = FindingKind.NONDETERMINISTIC_REPLAY
STAGE = "step"


def run(ctx: StepContext) -> Finding | None:
    if ctx.step_index != 0:
        return None
    saved = SavedStatics(static_dict(ctx.session.target), ctx.seed, ctx.region, ctx.comparator.paged)
    first = ctx.replay_live()
    saved.restore()
    second = ctx.replay_live()
    ctx.replayed = second
    mism = ctx.comparator.outputs(first, second, ctx.batch, bitwise=True)
    if not mism:
        return None
    m = mism[0]
    return Finding(
        kind=KIND,
        message=f"two replays of one prepared batch differ in {m.tensor}: {m.count}/{m.total} values, max abs {m.max_abs:.3g}",
        where=m.tensor,
        mismatches=mism,
        cause=f"output:{m.tensor}",
    )

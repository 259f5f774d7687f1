"""output-not-written: the replay leaves live output positions unwritten.

Stage ``diagnosis``.  Outputs are NaN-filled before every replay.  On a mismatch, the prepared batch
is replayed twice more with two different sentinels in the outputs: positions that keep the
sentinel both times were never written by the graph.
"""

from __future__ import annotations

from ...findings import Finding, FindingKind, Mismatch
from ..context import StepContext

KIND = FindingKind.OUTPUT_NOT_WRITTEN
STAGE = "diagnosis"
_SENTINELS = (1234.5, -4321.25)


def run(ctx: StepContext) -> Finding | None:
    kept = []
    for v in _SENTINELS:
        live = ctx.replay_live(fill=v)
        kept.append([(t == (v if t.dtype.is_floating_point else int(v))) for t in live])
    mism = []
    for i, (a, b) in enumerate(zip(*kept)):
        both = a & b
        n = int(both.sum())
        if n:
            rows = both.reshape(both.shape[0], -1).any(dim=1).nonzero().reshape(-1)[:8].tolist() if both.dim() else []
            first = [dict(zip(("request", "token"), ctx.batch.token_owner(r)), row=r) for r in rows]
            mism.append(Mismatch(f"output[{i}]", n, both.numel(), float("nan"), float("nan"), first))
    if not mism:
        ctx.evidence.note(KIND.value, "the replay writes every live output position (two sentinel fills)")
        return None
    m = mism[0]
    return Finding(
        kind=KIND,
        message=f"the replay never writes {m.count}/{m.total} live positions of {m.tensor} (they keep any value put there before the replay)",
        where=m.tensor,
        mismatches=mism,
        cause=f"output:{m.tensor}",
    )

"""unpersisted-metadata: the graph reads a buffer that did not hold this batch's values, while this
step's prepare wrote them elsewhere.

Uses the same write ledger as lazy-init, region by region of what the graph reads: a region this
step's prepare did not write for this batch (not at all, or only on alternate calls, as a double
buffer does) and that an earlier prepare wrote (at capture, or an earlier step).  Where the values
went is named when it can be found: a rebound attribute, the other copy in the same allocation, a
buffer at the same path but for a container index, or what an eager run of this batch reads at
the same kernel argument.  A region nothing but ``setup()`` ever wrote counts only with such a
place: a table of constants is no metadata.
"""

from __future__ import annotations

from ..capture.context import StepContext
from ..findings import Finding, FindingKind

KIND = FindingKind.UNPERSISTED_METADATA
STAGE = "diagnose"


def run(ctx: StepContext) -> Finding | None:
    ev = ctx.evidence
    reads = [r for r in ev.unwritten_reads if r.origin in ("earlier-prepare", "never-written")]
    moved: dict[int, list[str]] = {r.key: ev.rebound([r.key]) + ev.moved_to(r) for r in reads}
    hits = [r for r in reads if r.origin == "earlier-prepare" or moved[r.key]]
    if not hits:
        ev.note(
            KIND.value,
            f"every region the graph reads held this batch's values after prepare() "
            f"({len(ev.graph_read_tensors)} buffers), or only setup() ever wrote it",
        )
        return None
    names = ", ".join(r.path for r in hits)
    first = hits[0]
    if first.alternate:
        how = "this step's prepare() writes it on alternate calls only (a double buffer the graph froze one copy of)"
    elif first.stale:
        how = "it did not hold what this step's prepare() writes there"
    elif first.origin == "never-written":
        how = "nothing but setup() ever wrote it"
    else:
        how = "this step's prepare() did not write it"
    msg = f"the graph reads {names} as captured, but {how}"
    went = list(dict.fromkeys(p for r in hits for p in moved[r.key]))
    if went:
        msg += f"; this step's values went elsewhere: {', '.join(went[:4])}"
    return Finding(
        kind=KIND,
        message=msg,
        where=first.path,
        details={"buffers": [r.path for r in hits], "new": went, "origin": first.origin},
        cause="buffer:" + (ctx.info.paths.get(first.key) or [first.path.split(", ")[0]])[0],
    )

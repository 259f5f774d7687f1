"""unpersisted-metadata: the graph reads a live buffer that this step's prepare did not rewrite.

Uses the same write ledger as lazy-init: the buffer was written by an earlier
prepare (at capture, or an earlier step) but not by this one, while this
step's metadata went elsewhere (a new tensor or another attribute).
"""

from __future__ import annotations

from ..capture.context import StepContext
from ..findings import Finding, FindingKind

KIND = FindingKind.UNPERSISTED_METADATA
STAGE = "diagnose"


def run(ctx: StepContext) -> Finding | None:
    hits = [r for r in ctx.evidence.unwritten_reads if r.origin == "earlier-prepare"]
    if not hits:
        return None
    moved = ctx.evidence.rebound([r.key for r in hits])
    names = ", ".join(r.path for r in hits)
    msg = f"the graph reads {names} as captured, but this step's prepare() did not write it"
    if moved:
        msg += f"; this step's values went elsewhere: {', '.join(moved)}"
    return Finding(kind=KIND, message=msg, where=hits[0].path, details={"buffers": [r.path for r in hits], "new": moved},
                   cause="buffer:" + hits[0].path.split(", ")[0])

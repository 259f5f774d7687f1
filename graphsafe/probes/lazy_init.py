"""lazy-init: the graph reads a buffer written only during warm-up, never by prepare nor by the graph.

The write ledger records which buffers changed during the capture-time
prepare, during warm-up, and which ones captured launches write; on a mismatch
this step's prepare is re-run over poisoned buffers to see what it writes.  A
buffer the graph reads that only warm-up wrote is a planning result that
capture skipped (a have-initialized flag set by warm-up).
"""

from __future__ import annotations

from ..findings import Finding, FindingKind

KIND = FindingKind.LAZY_INIT


def run(ctx) -> Finding | None:
    hits = [r for r in ctx.evidence.unwritten_reads if r.origin == "warmup-only"]
    if not hits:
        return None
    names = ", ".join(r.path for r in hits)
    return Finding(
        kind=KIND,
        message=(
            f"the graph reads {names}, written only during warm-up: capture skipped the kernel that fills it, "
            "so every replay uses the warm-up batch's values"
        ),
        where=hits[0].path,
        details={"buffers": [r.path for r in hits]},
    )

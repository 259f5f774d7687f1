"""lazy-init: the graph reads a buffer written only during warm-up, never by prepare nor by the graph.

Two signals.  Launches: a kernel that ran during warm-up, writes a buffer the
graph reads, and is missing from the capture (a have-initialized flag set by
warm-up made capture skip it).  Ledger: the write ledger records which buffers
changed during the capture-time prepare and during warm-up, and which ones
captured launches write; this step's prepare is re-run over poisoned buffers
to see what it writes; a buffer the graph reads that only warm-up wrote is a
planning result that capture skipped.
"""

from __future__ import annotations

from ..capture.context import StepContext
from ..engines.recording import TensorArg
from ..findings import Finding, FindingKind

KIND = FindingKind.LAZY_INIT
STAGE = "diagnose"


def skipped_kernels(ctx) -> list[tuple[str, str]]:
    """(kernel, buffer path) for warm-up kernels that capture skipped and whose output the graph reads."""
    info = ctx.info
    captured = {l.name for l in info.launches}
    reads = ctx.graph.recording.external
    out = []
    for launch in info.warmup_launches:
        if launch.kind != "triton" or launch.name in captured:
            continue
        touched = [(a, v) for a, v in launch.args.items() if isinstance(v, TensorArg) and v.key in reads]
        # arguments seen written during warm-up first; a planner that rewrote identical values
        # shows no write, so any buffer it shares with the graph still counts
        written = [(a, v) for a, v in touched if (launch.name, a) in info.warmup_kernel_writes]
        for arg, v in written or touched:
            path = ", ".join(info.paths.get(v.key, [])) or arg
            if (launch.name, path) not in out:
                out.append((launch.name, path))
    return out


def run(ctx: StepContext) -> Finding | None:
    skipped = skipped_kernels(ctx)
    if skipped:
        kernel, path = skipped[0]
        names = ", ".join(p for _, p in skipped)
        return Finding(
            kind=KIND,
            message=(
                f"{kernel} ran during warm-up but not in the captured graph, and the graph reads what it wrote "
                f"({names}): every replay uses the warm-up batch's plan"
            ),
            where=path,
            details={"kernels": sorted({k for k, _ in skipped}), "buffers": [p for _, p in skipped]},
            cause="buffer:" + path.split(", ")[0],
        )
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
        cause="buffer:" + hits[0].path.split(", ")[0],
    )

"""lazy-init: the graph reads a buffer whose writer ran during warm-up and not in the capture.

Two signals.  Launches: the warm-up's launches (aten ops and Triton kernels) are matched with the
capture's, each by kernel and the persistent buffers it touches; a warm-up launch with no match (a
have-initialized flag set by warm-up made capture skip it) that writes a region the graph reads
explains the difference, unless this step's ``prepare`` wrote this batch's values there too (an eager
``forward()`` that plans again what ``prepare`` planned: the replay read ``prepare``'s values); a
``prepare`` that only zeroes the region (clears a plan) leaves the replay reading no plan at all, and
that still counts.  When the graph writes that buffer too (an accumulator the skipped launch zeroed),
it counts only if a replay reads it before writing it: replays over two fills of it differ.  Ledger:
the write ledger records which buffers changed during the capture-time prepare and during warm-up, and
this step's prepare is re-run over filled buffers to see what it writes; a region the graph reads that
only warm-up wrote is a planning result that capture skipped.
"""

from __future__ import annotations

import difflib

from ...capture.regions import byte_region, written_args
from ...engines.recording import Launch, TensorArg
from ...findings import Finding, FindingKind
from ..carried import carried_inputs
from ..context import StepContext

KIND = FindingKind.LAZY_INIT
STAGE = "diagnosis"


def _token(launch: Launch, persistent: dict) -> tuple:
    """What identifies a launch across warm-up and capture: kernel, and the persistent buffers it touches."""
    keys = []
    for v in launch.args.values():
        for x in v if isinstance(v, tuple) else (v,):
            if isinstance(x, TensorArg):
                keys.append(x.key if x.key in persistent else None)
    return launch.kind, launch.name, tuple(keys)


def skipped_launches(ctx) -> list[Launch]:
    """Warm-up launches (doing device work) that the capture has no match for, in warm-up order."""
    info = ctx.info
    warm = [launch for launch in info.warmup_launches if launch.device_work]
    cap = [launch for launch in info.launches if launch.device_work]
    sm = difflib.SequenceMatcher(
        a=[_token(x, info.paths) for x in warm], b=[_token(x, info.paths) for x in cap], autojunk=False
    )
    return [warm[i] for tag, i1, i2, _, _ in sm.get_opcodes() if tag in ("delete", "replace") for i in range(i1, i2)]


def skipped_writes(ctx) -> list[tuple[Launch, TensorArg, bool]]:
    """``(launch, argument, carried)`` for each region a skipped warm-up launch wrote that the graph reads:
    ``carried`` when the graph writes that buffer too and a replay reads it first."""
    info, ev = ctx.info, ctx.evidence
    ext = ctx.graph.recording.external
    out: list[tuple[Launch, TensorArg, bool]] = []
    rw: list[int] = []
    for launch in skipped_launches(ctx):
        for v in written_args(launch, info.warmup_kernel_writes):
            r = byte_region(v)
            if r is None or v.key not in ext or v.key in ctx.session.static_keys or not ext[v.key].alive():
                continue
            if not any(lo < r[1] and r[0] < hi for lo, hi, _ in ev.read_regions(v.key)):
                continue
            if (
                v.key not in info.graph_written
                and v.key in ev.as_replayed
                and ev.wrote_for_batch(v.key, *r)
                and not ev.ledger.step.zeroes(v.key, *r)
            ):
                continue  # this step's prepare wrote this batch's values there: the replay did not read the warm-up's
            if any(v.key == a.key for _, a, _ in out):
                continue
            out.append((launch, v, v.key in info.graph_written))
            if v.key in info.graph_written:
                rw.append(v.key)
    carried = set(carried_inputs(ctx, rw)) if rw else set()
    return [(launch, v, rmw) for launch, v, rmw in out if not rmw or v.key in carried]


def run(ctx: StepContext) -> Finding | None:
    ev = ctx.evidence
    skipped = skipped_writes(ctx)
    if skipped:
        launch, v, carried = skipped[0]
        # a buffer the graph reads and writes is named whole; a region it only reads, as the view it reads
        names = list(
            dict.fromkeys(
                ev.name(a.key) if rmw else ev.name(a.key, *(byte_region(a) or ()), arg=a) for _, a, rmw in skipped
            )
        )
        kernels = sorted({x.name for x, _, _ in skipped})
        if carried:
            msg = (
                f"{launch.name} ran during warm-up but not in the captured graph; it reset {names[0]}, which the "
                "graph reads and writes: every replay starts from what the buffer held before it (the last replay's)"
            )
        else:
            msg = (
                f"{launch.name} ran during warm-up but not in the captured graph, and the graph reads what it wrote "
                f"({', '.join(names)}): every replay uses the warm-up batch's plan"
            )
        return Finding(
            kind=KIND,
            message=msg,
            where=names[0],
            details={"kernels": kernels, "buffers": names, "carried": carried},
            cause="buffer:" + (ctx.info.paths.get(v.key) or [names[0].split(", ")[0]])[0],
        )
    hits = [r for r in ev.unwritten_reads if r.origin == "warmup-only"]
    if not hits:
        ev.note(
            KIND.value,
            "every launch of the warm-up is in the capture, and no region the graph reads was "
            "written only during warm-up",
        )
        return None
    read = ", ".join(r.path for r in hits)
    for r in hits:
        ev.claim(KIND.value, r.key, r.region)
    return Finding(
        kind=KIND,
        message=(
            f"the graph reads {read}, written only during warm-up: capture skipped the kernel that fills it, "
            "so every replay uses the warm-up batch's values"
        ),
        where=hits[0].path,
        details={"buffers": [r.path for r in hits]},
        cause="buffer:" + (ctx.info.paths.get(hits[0].key) or [hits[0].path.split(", ")[0]])[0],
    )

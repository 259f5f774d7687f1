"""stale-pointer: the graph reads memory whose tensor was freed after capture.

Stage ``step``: after every ``prepare`` (before the replay that would read it), each buffer the
graph recorded at capture is checked: a storage nobody but the graph holds any
more is a dangling address.  Deterministic, whatever the allocator does next.  The buffers are the
ones the recorder saw launches read, and on the CUDA engine every storage of the target an address in
the captured graph's nodes points into (the graph reader: kernels nobody wrapped, cuBLAS, extensions),
named by kernel, parameter and the path the storage had at capture.

Host memory the graph reads that the target does not hold at capture (a memcpy node's host source, a
kernel parameter pointing to pinned host memory) is a stale pointer too, from the first step: it was a
temporary of ``forward()`` or belongs to something graphsafe cannot see, and every replay reads whatever
lies there then (the capture batch's values until the allocator reuses the memory), not this step's.
"""

from __future__ import annotations

from typing import Any

from ...capture.statewalk import paths_by_storage
from ...findings import Finding, FindingKind
from ..context import StepContext

KIND = FindingKind.STALE_POINTER
STAGE = "step"


def run(ctx: StepContext) -> Finding | None:
    dead = ctx.graph.dead_inputs()
    if not dead:
        return _host_reads(ctx) if ctx.graph.host_reads else None
    info = ctx.info
    now = paths_by_storage(ctx.session.target)
    parts: list[str] = []
    details: list[dict[str, Any]] = []
    for buf in dead:
        paths = info.paths.get(buf.key, [])
        name = ", ".join(paths) or f"<tensor first used at {buf.first_use}>"
        repl = []
        for p in paths:
            for key, ps in now.items():
                if p in ps:
                    repl.append(f"{p} now at {hex(key)}")
        recorded = [k for k in buf.kernels if not any(r.startswith(f"{k} (") for r in buf.refs)]
        readers = ", ".join([*recorded[:3], *buf.refs[:2]])  # the recorded launches, then the graph's nodes
        parts.append(
            f"{name} ({buf.dtype}, {buf.nbytes} bytes at {hex(buf.address)}, read by {readers}) was freed after capture"
            + (f"; {'; '.join(repl)}" if repl else "")
        )
        details.append(
            {"path": name, "address": hex(buf.address), "replacement": repl, "kernels": buf.kernels, "graph": buf.refs}
        )
    return Finding(
        kind=KIND,
        message="the graph reads freed memory: " + " | ".join(parts),
        where=details[0]["path"],
        details={"dead": details},
        cause="buffer:" + details[0]["path"].split(", ")[0],
    )


def _host_reads(ctx: StepContext) -> Finding:
    reads = ctx.graph.host_reads
    parts = []
    for p in reads[:4]:
        what = "pinned host memory" if p.kind == "host-pinned" else "pageable host memory"
        if p.param < 0:
            node = next((n for n in ctx.graph.read.nodes if n.index == p.node), None)
            size = f"{node.nbytes} bytes " if node is not None else ""
            parts.append(f"{p.where()} copies {size}from {what} at {p.value:#x}")
        else:
            parts.append(f"{p.where()} points to {what} at {p.value:#x}")
    msg = (
        "the graph reads host memory the target does not hold: "
        + "; ".join(parts)
        + ". It was a temporary of forward() (or belongs to something graphsafe cannot see): every replay reads "
        "whatever lies there then, the capture's values until the memory is reused, not this step's; keep the "
        "host buffer on the target and write it in prepare()"
    )
    first = reads[0]
    return Finding(
        kind=KIND,
        message=msg,
        where=first.where(),
        details={"host": [{"where": p.where(), "address": hex(p.value), "memory": p.kind} for p in reads]},
        cause=f"host:{first.label}",
    )

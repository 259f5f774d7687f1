"""stale-pointer: the graph reads memory whose tensor was freed after capture.

Stage ``step``: after every ``prepare`` (before the replay that would read it), each buffer the
graph recorded at capture is checked: a storage nobody but the graph holds any
more is a dangling address.  Deterministic, whatever the allocator does next.
"""

from __future__ import annotations

from typing import Any

from ..capture.context import StepContext
from ..capture.statewalk import paths_by_storage
from ..findings import Finding, FindingKind

KIND = FindingKind.STALE_POINTER
STAGE = "step"


def run(ctx: StepContext) -> Finding | None:
    dead = ctx.graph.dead_inputs()
    if not dead:
        return None
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
        kernels = ", ".join(buf.kernels[:3])
        parts.append(
            f"{name} ({buf.dtype}, {buf.nbytes} bytes at {hex(buf.address)}, read by {kernels}) was freed after capture"
            + (f"; {'; '.join(repl)}" if repl else "")
        )
        details.append({"path": name, "address": hex(buf.address), "replacement": repl, "kernels": buf.kernels})
    return Finding(
        kind=KIND,
        message="the graph reads freed memory: " + " | ".join(parts),
        where=details[0]["path"],
        details={"dead": details},
        cause="buffer:" + details[0]["path"].split(", ")[0],
    )

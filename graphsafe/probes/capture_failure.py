"""capture-failure: forward() cannot be captured (host sync inside the graph, or it raises during capture).

Detected by the capture session itself (``graphsafe/_internal/session.py``):
on CUDA, forward() first runs eagerly under
``torch.cuda.set_sync_debug_mode("error")`` so the finding names the line that
synchronises before a real capture can break the context; on the emulator the
recorder raises at the op (``.item()``, ``.tolist()``, ``nonzero``) that reads
graph data back to the host.
"""

from __future__ import annotations

import traceback

from ..findings import Finding, FindingKind

KIND = FindingKind.CAPTURE_FAILURE


def user_location(exc: BaseException) -> str:
    """``file:line in func`` of the deepest traceback frame outside torch, triton and graphsafe's engines."""
    where = getattr(exc, "where", "")
    if where:
        return where
    best = ""
    for fs in traceback.extract_tb(exc.__traceback__):
        fn = fs.filename.replace("\\", "/")
        if "/torch/" in fn or "/triton/" in fn or "/graphsafe/engines/" in fn or "/graphsafe/_internal/" in fn:
            continue
        if "/graphsafe/checker" in fn:
            continue
        best = f"{fs.filename}:{fs.lineno} in {fs.name}"
    return best


def finding(exc: BaseException, *, size: int, phase: str) -> Finding:
    where = user_location(exc)
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Finding(
        kind=KIND,
        message=f"{phase} of size {size} failed: {type(exc).__name__}: {msg}",
        where=where,
        error="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        details={"phase": phase},
    )

"""capture-failure: forward() cannot be captured (host sync inside the graph, or it raises during capture).

Stage ``capture``.  The capture session records the failure (``graphsafe/capture/session.py``):
on CUDA, forward() first runs eagerly under ``torch.cuda.set_sync_debug_mode("error")`` so the
finding names the line that synchronises before a real capture can break the context; on the
emulator the recorder raises at the op (``.item()``, ``.tolist()``, ``nonzero``) that reads graph
data back to the host.
"""

from __future__ import annotations

import traceback

from ...capture.context import CaptureContext
from ...engines.userframe import user_frame_of
from ...findings import Finding, FindingKind

KIND = FindingKind.CAPTURE_FAILURE
STAGE = "capture"


def run(ctx: CaptureContext) -> Finding | None:
    exc = ctx.error
    text = str(exc).strip()
    msg = text.splitlines()[0] if text else type(exc).__name__
    where = user_frame_of(exc)
    return Finding(
        kind=KIND,
        message=f"capture of size {ctx.size} failed: {type(exc).__name__}: {msg}",
        where=where,
        cause=f"line:{where}",
        error="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        details={"phase": "capture"},
        capture_size=ctx.size,
        capture_batch=ctx.batch,
    )

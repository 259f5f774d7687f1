"""Who, line by line, wrote a buffer during one call of ``prepare``: the statements of the target's own
``prepare`` traced, and the buffers compared after each, so that a region two statements wrote (two plans into
one workspace, the later one for another layer group or graph) names both.

``sys.settrace`` follows only the frame of ``prepare`` itself: a statement's writes include everything it
calls (a FlashInfer ``plan()``, a helper of the target).  The device is synchronised before each comparison, so
asynchronous copies count for the statement that queued them.  Diagnosis only: one more call of ``prepare``,
the buffers restored afterwards.
"""

from __future__ import annotations

import linecache
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..capture.ledger import Snapshot
from ..capture.statewalk import byte_view
from ..engines.userframe import display_path

__all__ = ["Write", "trace_writes"]


@dataclass
class Write:
    """One statement's writes into one storage: which bytes changed, and what they held after it."""

    key: int
    label: str  # ``file:line in prepare`` (and which time that line ran, when it ran more than once)
    source: str  # the statement's text
    mask: torch.Tensor  # bool per byte, whole words (see _words)
    after: torch.Tensor  # the storage's bytes after the statement


def _words(changed: torch.Tensor, element_size: int) -> torch.Tensor:
    """Changed bytes widened to whole words (the dtype's elements, and at least 4 bytes: a byte buffer holding a
    schedule of int32s, as FlashInfer's int workspace does, changes some bytes of each value only)."""
    width = max(4, element_size)
    if changed.numel() % width:
        width = element_size
    return changed.view(-1, width).any(dim=1, keepdim=True).expand(-1, width).reshape(-1)


def trace_writes(target: Any, run_prepare: Callable[[], Any], tensors: dict[int, torch.Tensor]) -> list[Write]:
    """Run ``run_prepare`` (a call of ``target.prepare``) once, statement by statement, and return each
    statement's writes into ``tensors`` in order; the tensors are restored afterwards."""
    code = getattr(getattr(target.prepare, "__func__", None), "__code__", None)
    if code is None or not tensors:
        return []
    snap = Snapshot(tensors)
    last = {k: byte_view(t).clone() for k, t in tensors.items()}
    out: list[Write] = []
    runs: dict[int, int] = {}
    current: list[Any] = [None]  # (file, line) of the statement running now

    def check() -> None:
        if current[0] is None:
            return
        if any(t.is_cuda for t in tensors.values()):
            torch.cuda.synchronize()
        filename, line = current[0]
        for k, t in tensors.items():
            now = byte_view(t)
            if torch.equal(now, last[k]):
                continue
            n = runs.get(line, 1)
            label = f"{display_path(filename)}:{line} in prepare" + (f" (its run {n})" if n > 1 else "")
            source = linecache.getline(filename, line).strip()
            out.append(Write(k, label, source, _words(now != last[k], t.element_size()), now.clone()))
            last[k] = now.clone()

    def local(frame, event, arg):
        if event in ("line", "return"):
            check()
            if event == "line":
                current[0] = (frame.f_code.co_filename, frame.f_lineno)
                runs[frame.f_lineno] = runs.get(frame.f_lineno, 0) + 1
        return local

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code is code:
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        run_prepare()
    finally:
        sys.settrace(previous)
        snap.restore()
    return out

"""One sandbox per (target, engine, device) for the life of the process, a few children alive at once.

A target's checks share its sandbox's child.  Each child holds torch, the target and, on a GPU, a
CUDA context, so at most :data:`MAX_LIVE` are kept alive: beyond that the least recently used idle
one is stopped, and starts again when its target is checked next.  Every child is stopped at exit.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from .parent import Sandbox
from .wire import target_ref

__all__ = ["get_sandbox", "close_all", "MAX_LIVE"]

#: child processes kept alive at once per process
MAX_LIVE = max(1, int(os.environ.get("GRAPHSAFE_SANDBOXES", "3") or 3))


class _Pool:
    def __init__(self) -> None:
        self.boxes: dict[tuple, Sandbox] = {}
        self.lock = threading.Lock()
        self.clock = 0
        self.last_use: dict[int, int] = {}  # id(sandbox) -> clock at its last use

    def touched(self, box: Sandbox) -> None:
        self.clock += 1
        self.last_use[id(box)] = self.clock

    def started(self, box: Sandbox) -> None:
        """Stop the least recently used idle children beyond :data:`MAX_LIVE`."""
        self.touched(box)
        with self.lock:
            live = [b for b in self.boxes.values() if b is not box and b.alive]
        live.sort(key=lambda b: self.last_use.get(id(b), 0))
        excess = len(live) + 1 - MAX_LIVE
        for b in live:
            if excess <= 0:
                break
            if b.idle:
                b.close()
                excess -= 1

    def get(self, target: Any, engine: str, device: int | None) -> Sandbox:
        ref, by_class, _ = target_ref(target)
        key = (ref if ref is not None else target, by_class, engine, device)
        with self.lock:
            box = self.boxes.get(key)
            if box is None:
                box = self.boxes[key] = Sandbox(target, engine=engine, device=device, pool=self)
            return box

    def close_all(self) -> None:
        with self.lock:
            boxes = list(self.boxes.values())
            self.boxes.clear()
        for box in boxes:
            try:
                box.close()
            except Exception:  # noqa: BLE001 - exiting anyway
                pass


_POOL = _Pool()


def get_sandbox(target: Any, engine: str = "auto", device: int | None = None) -> Sandbox:
    """The process-wide sandbox for ``target`` on ``engine``/``device`` (created on first use)."""
    return _POOL.get(target, engine, device)


def close_all() -> None:
    """Stop every sandbox process this process started (runs at exit)."""
    _POOL.close_all()


atexit.register(close_all)

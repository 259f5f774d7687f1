"""One sandbox per (target, engine, device) for the life of the process, a few children alive at once.

A target's checks share its sandbox's child.  Each child holds torch, the target and, on a GPU, a
CUDA context, so at most :data:`MAX_LIVE` are kept alive: beyond that the least recently used idle
one is stopped, and starts again when its target is checked next.  Every child is stopped at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterator
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
        self.in_use: dict[int, int] = {}  # id(sandbox) -> checks of it under way (threads of `check --jobs`)

    def touched(self, box: Sandbox) -> None:
        with self.lock:
            self.clock += 1
            self.last_use[id(box)] = self.clock

    @contextlib.contextmanager
    def using(self, box: Sandbox) -> Iterator[None]:
        """While a check of ``box`` is under way, from its start to its answer: its child is never stopped to
        make room, even while it starts or waits for the request (another thread may be starting a child)."""
        with self.lock:
            self.clock += 1
            self.last_use[id(box)] = self.clock
            self.in_use[id(box)] = self.in_use.get(id(box), 0) + 1
        try:
            yield
        finally:
            with self.lock:
                self.in_use[id(box)] -= 1
                if not self.in_use[id(box)]:
                    del self.in_use[id(box)]

    def started(self, box: Sandbox) -> None:
        """Stop the least recently used idle children beyond :data:`MAX_LIVE` (none that a check is using)."""
        self.touched(box)
        with self.lock:
            live = [b for b in self.boxes.values() if b is not box and b.alive]
            live.sort(key=lambda b: self.last_use.get(id(b), 0))
            excess = len(live) + 1 - MAX_LIVE
            for b in live:
                if excess <= 0:
                    break
                if b.idle and id(b) not in self.in_use:
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

"""How long the current replay has run, where a watching parent process can read it.

A kernel fed stale plan data can run away (an unsigned length that underflowed): the replay never ends,
and the process waits in the driver where no Python timeout reaches it.  A sandbox child installs a
:class:`Clock` on shared memory; every replay marks its start (:func:`replay_started`) and the wait that
proves it finished (:func:`replay_done`: the engine's ``synchronize``, or the emulator's replay
returning), and the step loop publishes the example's steps (:func:`example`, once per example) and the
step being run (:func:`step`).  The parent reads the clock (:meth:`Clock.overdue`) while it waits: a
replay running far past the longest one before it is a hang, reported with its step, long before the
check's own timeout.  Without an installed clock every call is a no-op.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Clock", "install", "replay_started", "replay_done", "example", "step", "HANG_FLOOR_S", "HANG_FACTOR"]

#: a replay is overdue after this many seconds whatever came before (the first replays included) ...
HANG_FLOOR_S = 20.0
#: ... or after this many times the longest replay the process finished before, if that is longer
HANG_FACTOR = 50.0

# slots of the shared numbers
_RUNNING, _STARTED, _LONGEST, _SIZE, _STEP, _EXAMPLE = range(6)
NUMBERS = 6
#: bytes for the JSON of the example being run
PLAN_BYTES = 1 << 16


class Clock:
    """The shared state: ``numbers`` (a shared array of doubles, :data:`NUMBERS` long) and ``plan`` (a shared
    array of :data:`PLAN_BYTES` chars), made by the parent (``multiprocessing`` ``RawArray``) and handed to
    the child, which installs it."""

    def __init__(self, numbers: Any, plan: Any):
        self.numbers, self.plan = numbers, plan

    def overdue(self, now: float | None = None) -> dict | None:
        """What the parent reports when a replay has run past :data:`HANG_FLOOR_S` and :data:`HANG_FACTOR`
        times the longest one before it: the seconds it has run, the longest before, the graph size, the
        step and the example's steps; None while nothing is overdue."""
        n = self.numbers
        if not n[_RUNNING]:
            return None
        ran = (time.time() if now is None else now) - n[_STARTED]
        if ran <= max(HANG_FLOOR_S, HANG_FACTOR * n[_LONGEST]):
            return None
        raw = bytes(self.plan).split(b"\0", 1)[0]
        try:
            plan = json.loads(raw.decode()) if raw else {}
        except ValueError:  # written while the child was killed: the numbers still stand
            plan = {}
        return {
            "seconds": ran,
            "longest": n[_LONGEST],
            "size": int(n[_SIZE]),
            "step": int(n[_STEP]),
            "steps": plan.get("steps", []),
            "capture": plan.get("capture"),
        }


_clock: Clock | None = None


def install(clock: Clock | None) -> None:
    """Publish this process's replays on ``clock`` (None: stop)."""
    global _clock
    _clock = clock


def replay_started(size: int) -> None:
    """A replay of the graph of ``size`` request slots is launched."""
    c = _clock
    if c is not None and not c.numbers[_RUNNING]:
        c.numbers[_SIZE] = size
        c.numbers[_STARTED] = time.time()
        c.numbers[_RUNNING] = 1.0


def replay_done() -> None:
    """The device has finished everything launched so far: a replay in flight is over."""
    c = _clock
    if c is not None and c.numbers[_RUNNING]:
        c.numbers[_LONGEST] = max(c.numbers[_LONGEST], time.time() - c.numbers[_STARTED])
        c.numbers[_RUNNING] = 0.0


def example(steps: Sequence[Any], capture: Callable[[], dict] | None = None) -> None:
    """The example about to run: its steps (each with ``to_dict()``) and how its graph was captured (``capture()``:
    the policy's name and a drawn capture batch, asked only while a clock is installed), for the parent's report
    of a hang and a fresh process that decides its cause."""
    c = _clock
    if c is None:
        return
    told = [s.to_dict() for s in steps]
    data = json.dumps({"steps": told, "capture": capture() if capture else None}).encode()
    if len(data) >= PLAN_BYTES:  # (too long to publish whole: the steps alone say which replay hung)
        data = json.dumps({"steps": told[:64], "capture": None}).encode()[: PLAN_BYTES - 1]
    c.plan[: len(data) + 1] = data + b"\0"
    c.numbers[_EXAMPLE] += 1


def step(index: int) -> None:
    """Step ``index`` (0-based) of the current example begins."""
    c = _clock
    if c is not None:
        c.numbers[_STEP] = index

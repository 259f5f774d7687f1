"""What a sandbox process's death means: its exit code or signal, where the target was, and what caused a replay
that took the process with it.

The child writes every thread's stack with :mod:`faulthandler` on a fatal signal (and on
``SIGUSR1``, which the parent sends before it kills a hung child); :func:`where_in_dump`
names the innermost frame of the target's own code in that text.  :func:`cause_elsewhere` asks a fresh
process for the cause of a replay that never ended or faulted.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable

from ...diagnosis.causes import group_by_cause
from ...engines.userframe import display_path, innermost_user_frame
from ...errors import ContextBroken, GraphsafeError, ReplayHung
from ...findings import KINDS, CheckResult

__all__ = ["death_text", "where_in_dump", "hung_error", "cause_elsewhere"]

_SIGNAL_MEANING = {
    "SIGSEGV": "an illegal memory access or a bad pointer",
    "SIGBUS": "a misaligned or unmapped memory access",
    "SIGABRT": "native code called abort() (a failed C++/CUDA assertion or an uncaught C++ exception)",
    "SIGFPE": "an arithmetic fault (an integer division by zero)",
    "SIGILL": "an illegal instruction (code built for another CPU, or a corrupted jump)",
    "SIGKILL": "it was killed from outside, most often by the kernel's out-of-memory killer",
    "SIGTERM": "it was terminated from outside",
}

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_GRAPHSAFE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def death_text(exitcode: int | None) -> str:
    """What an exit code (negative: the signal) most often means, in one clause."""
    if exitcode is None:
        return "the target's process stopped answering: the pipe to it closed"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        meaning = _SIGNAL_MEANING.get(name, "a fatal signal")
        return f"the target crashed its process ({name}): {meaning}"
    return (
        f"the target's process exited with code {exitcode} before answering: the target called "
        "sys.exit()/os._exit(), or the interpreter aborted"
    )


def where_in_dump(dump: str) -> str:
    """The innermost frame of the target's own code in a faulthandler dump ('' when none).

    faulthandler lists frames innermost first; the thread that serves checks is preferred.  With
    no frame of the target's own, the innermost graphsafe frame says what graphsafe was doing.
    """
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump)
    main = [b for b in blocks if " in _serve" in b] or blocks
    frames = [m.groupdict() for line in main[0].splitlines() if (m := _FRAME.match(line))]
    if not frames:
        return ""
    outermost_first = [(f["file"], f["line"], f["func"]) for f in reversed(frames)]
    where = innermost_user_frame(outermost_first)
    if where:
        return where
    ours = next((f for f in frames if os.path.abspath(f["file"]).startswith(_GRAPHSAFE + os.sep)), frames[0])
    return f"{display_path(ours['file'])}:{ours['line']} in {ours['func']}"


def hung_error(name: str, hung: dict, where: str, timeout: float) -> ReplayHung:
    """The :class:`~graphsafe.errors.ReplayHung` for a child whose replay clock is overdue (``hung``:
    :meth:`graphsafe.engines.replay_clock.Clock.overdue`), killed while it was in ``where``."""
    steps, i = hung["steps"], hung["step"]
    batch = steps[i] if 0 <= i < len(steps) else None
    what = (
        f"{name}: the replay of step {i} on the size-{hung['size']} graph ran {hung['seconds']:.1f} s "
        f"(the longest replay before it: {hung['longest'] * 1e3:.3g} ms): a kernel that does not end, often "
        "one reading stale plan data or indices; its process was killed"
    )
    if batch is not None:
        what += (
            f"; the step's batch: query_lens={batch['query_lens']}, seq_lens={batch['seq_lens']}, seed={batch['seed']}"
        )
    if where:
        what += f"; it was in {where}"
    return ReplayHung(
        what,
        where=where,
        timeout=timeout,
        steps=list(steps),
        step=i,
        size=hung["size"],
        seconds=hung["seconds"],
        longest=hung["longest"],
        capture=hung.get("capture"),
    )


def cause_elsewhere(
    err: ReplayHung | ContextBroken, ask: Callable[[dict], CheckResult], before: CheckResult | None = None
) -> CheckResult:
    """A check's process was lost to a replay that never ended or faulted (``err``): ``ask`` (the sandbox's request
    to a fresh child) runs that example again and decides the failed replay's cause without replaying it
    (:mod:`graphsafe.checker.unreplayable`).  ``before``: the check's result so far, as its child last sent it
    (findings of phases that ended before the one lost); they join the fresh process's, one per cause.  The result,
    with a note saying what happened; ``err`` (with what the fresh process saw) only when neither names anything, as
    it is when it names no example either."""
    what = "never ended" if isinstance(err, ReplayHung) else "faulted"
    fields = {n: getattr(err, n) for n in err._fields}
    found = list(before.findings) if before is not None else []
    named = bool(err.capture and err.steps and 0 <= err.step < len(err.steps))
    if not named and not found:
        raise err  # no example to run again (a capture that broke the context), and nothing found before it
    saw, result = "it names no example to run again", None
    if named:
        try:
            result = ask({"steps": list(err.steps), "step": err.step, "size": err.size, "capture": err.capture})
        except GraphsafeError as again:
            first = (again.message.strip().splitlines() or [""])[0]
            saw = f"running that example again in a fresh process to decide its cause failed too ({type(again).__name__}: {first})"
        else:
            kinds = ", ".join(k.value for k, info in KINDS.items() if info.without_replay)
            saw = (
                f"a fresh process ran that example again, and nothing that needs no replay ({kinds}) explains step "
                f"{err.step}"
            )
    if result is not None and result.findings:
        for f in result.findings:
            f.message += (
                f"; this step's replay {what} and took the check's process with it: a fresh process decided the "
                "cause without replaying it"
            )
        saw = "graphsafe ran that example again in a fresh process and decided the failed replay's cause without replaying it"
    elif not found:
        raise type(err)(f"{err.message}; {saw}", **fields) from None
    out = result if result is not None and result.findings else before
    assert out is not None
    out.findings = group_by_cause(found + (result.findings if out is result else []))
    if before is not None and out is not before:  # the check's own counts and notes, the fresh process's findings
        out.notes = [*before.notes, *(n for n in out.notes if n not in before.notes)]
        out.examples, out.calls, out.steps = before.examples, before.calls, before.steps + out.steps
        out.seconds += before.seconds + (err.seconds if isinstance(err, ReplayHung) else 0.0)
    out.notes.append(
        f"{err.message.split('; ')[0]}; {saw}; the rest of the check did not run"
        + (f"; the findings of the phases before it ({len(found)}) are kept" if found else "")
    )
    return out

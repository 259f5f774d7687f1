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

from ...engines.userframe import display_path, innermost_user_frame
from ...errors import ContextBroken, GraphsafeError, ReplayHung
from ...findings import CheckResult

__all__ = ["death_text", "where_in_dump", "cause_elsewhere"]

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


def cause_elsewhere(err: ReplayHung | ContextBroken, ask: Callable[[dict], CheckResult]) -> CheckResult:
    """A check's process was lost to a replay that never ended or faulted (``err`` names its example): ``ask``
    (the sandbox's request to a fresh child) runs that example again and decides the failed replay's cause without
    replaying it (:mod:`graphsafe.checker.unreplayable`).  Its result, with a note; ``err`` again, with what the
    fresh process saw, when it names no cause; ``err`` as it is when it names no example (nothing to run again)."""
    if not (err.capture and err.steps and 0 <= err.step < len(err.steps)):
        raise err  # no example named: nothing to run again
    what = "never ended" if isinstance(err, ReplayHung) else "faulted"
    fields = {n: getattr(err, n) for n in err._fields}
    try:
        result = ask({"steps": list(err.steps), "step": err.step, "size": err.size, "capture": err.capture})
    except GraphsafeError as again:
        first = (again.message.strip().splitlines() or [""])[0]
        raise type(err)(
            f"{err.message}; running that example again in a fresh process to decide its cause failed too "
            f"({type(again).__name__}: {first})",
            **fields,
        ) from None
    if not result.findings:
        raise type(err)(
            f"{err.message}; a fresh process ran that example again, and nothing that needs no replay (a frozen host "
            f"value, a write only the warm-up made, a freed buffer) explains step {err.step}",
            **fields,
        )
    for f in result.findings:
        f.message += (
            f"; this step's replay {what} and took the check's process with it: a fresh process decided the cause "
            "without replaying it"
        )
    result.notes.append(
        f"{err.message.split('; ')[0]}; graphsafe ran that example again in a fresh process and decided the failed "
        "replay's cause without replaying it; the rest of the check did not run"
    )
    return result

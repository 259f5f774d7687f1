"""What a sandbox process's death means: its exit code or signal, and where the target was.

The child writes every thread's stack with :mod:`faulthandler` on a fatal signal (and on
``SIGUSR1``, which the parent sends before it kills a hung child); :func:`where_in_dump`
names the innermost frame of the target's own code in that text.
"""

from __future__ import annotations

import os
import re
import signal

from ...engines.userframe import display_path, innermost_user_frame

__all__ = ["death_text", "where_in_dump"]

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

"""Specifications for the command line's progress line (``console.ProgressBar``).

* on a terminal, a check that has run its delay shows one line: examples run of the planned ones, the
  capture phase, the stage of its search (searching, shrinking) and the finding kinds so far;
* before the delay (a quick check), and whenever stderr is not a terminal (a pipe, a log file), nothing.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from tests.subprocesses import env_with_repo

CHILD = """
import sys
from graphsafe.checker import Progress
from graphsafe.frontend.console import ProgressBar

with ProgressBar("scale:ScaleKeptLens", delay=float(sys.argv[1])) as bar:
    bar.update(Progress(3, 50, "worst", (), "searching"))
    bar.update(Progress(7, 50, "worst", ("stale-pointer",), "shrinking"))
    sys.stderr.write("DONE\\n")
"""


def _on_a_terminal(delay: float) -> str:
    """What the child wrote to its stderr, a pseudo-terminal."""
    main, sub = pty.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # a fresh pty is 0 columns wide
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(delay)], stdin=sub, stdout=sub, stderr=sub, env=env_with_repo()
        )
    finally:
        os.close(sub)
    chunks = []
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode("utf-8", errors="replace")


def test_a_terminal_shows_examples_phase_stage_and_kinds():
    out = _on_a_terminal(delay=0)
    assert "scale:ScaleKeptLens" in out and "7/50" in out
    assert "worst capture, shrinking: stale-pointer" in out
    assert "DONE" in out


def test_a_terminal_shows_nothing_before_the_delay():
    out = _on_a_terminal(delay=3600)
    assert out.strip() == "DONE"


def test_a_pipe_shows_nothing():
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "0"], capture_output=True, text=True, env=env_with_repo(), timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "DONE\n" and proc.stdout == ""

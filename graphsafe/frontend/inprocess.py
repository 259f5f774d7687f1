"""One check in this process: the Hypothesis profile, a deadline, the check, the reports.

This is the half of "run one check" that runs where the target runs: in the caller's process
without isolation, in the target's sandbox child with it (:mod:`graphsafe.frontend.runner`
chooses).  It is the only place reports are written.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from ..checker import CheckOptions, Progress, run_check
from ..checker.unreplayable import cause_without_replay
from ..engines.userframe import innermost_user_frame
from ..errors import TargetTimeout
from ..findings import CheckResult
from ..reports import prune_stale, report_path, write_report
from .options import RunOptions, check_report_dir, one_line
from .profiles import hypothesis_profile

__all__ = ["RunOptions", "run_here", "write_reports", "check_report_dir", "deadline"]


class _Deadline(BaseException):
    """Raised in the main thread when the time is up (a BaseException: Hypothesis must not shrink it)."""


#: extra seconds after the deadline before a check stuck in native code ends the process with a stack dump
HARD_STOP_GRACE_S = 30.0
#: a deadline that falls inside an import (torch imports sympy at a first dispatch-mode call: seconds on a
#: loaded machine) is asked again this many seconds later, until the import is done
IMPORT_GRACE_S = 0.25


@contextlib.contextmanager
def deadline(seconds: float, label: str) -> Iterator[None]:
    """Stop the block after ``seconds`` with :class:`TargetTimeout` (main thread only; elsewhere no limit).

    A hang in Python code (or a blocking call that returns to Python) is interrupted by ``SIGALRM``,
    though never inside an import: one cut short would leave a half-made module behind (torch imports
    sympy lazily, and a half-made sympy fails every later check of the process), so the interruption
    waits for the import to end.  A hang inside native code (a GPU kernel that never ends) cannot be
    interrupted: ``HARD_STOP_GRACE_S`` later the process writes every thread's stack and exits, which is
    why isolation is the safe mode for backends that may hang.  Once the alarm has fired, whatever error
    leaves the block is the timeout: code it interrupted may have turned it into an error of its own.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return
    where: list[str] = []

    def on_alarm(signum: int, frame: Any) -> None:
        if _importing(frame):  # cut short, a module stays half made in sys.modules and breaks later checks
            signal.setitimer(signal.ITIMER_REAL, IMPORT_GRACE_S)
            return
        where.append(innermost_user_frame((fs.filename, fs.lineno, fs.name) for fs in traceback.extract_stack(frame)))
        raise _Deadline

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    _hard_stop_later(seconds + HARD_STOP_GRACE_S)
    try:
        yield
    except _Deadline:
        raise _timed_out(label, seconds, where) from None
    except Exception:
        if not where:
            raise
        # the deadline fired inside code that turned it into an error of its own (Hypothesis, interrupted
        # while it sets a search up, fails an internal assertion): the time is up all the same
        raise _timed_out(label, seconds, where) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()


def _timed_out(label: str, seconds: float, where: list[str]) -> TargetTimeout:
    at = where[0] if where and where[0] else ""
    return TargetTimeout(
        f"{label}: no result within {seconds:g} s: {TargetTimeout.CAUSES}" + (f"; it was in {at}" if at else ""),
        where=at,
        timeout=seconds,
    )


def _importing(frame: Any) -> bool:
    """Is the main thread inside an import (a frame of importlib's bootstrap on its stack)?"""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _hard_stop_later(seconds: float) -> None:
    """faulthandler's timer: after ``seconds``, dump every thread's stack to stderr and exit."""
    for stream in (sys.stderr, sys.__stderr__):
        if stream is None:
            continue
        try:
            faulthandler.dump_traceback_later(seconds, exit=True, file=stream)
            return
        except (AttributeError, ValueError, OSError):  # a captured stream without a file descriptor
            continue


def run_here(
    target: Any,
    check: CheckOptions,
    run: RunOptions,
    *,
    label: str = "",
    limit: bool = True,
    progress: Callable[[Progress], None] | None = None,
    fault: dict | None = None,
    partial: Callable[[CheckResult], None] | None = None,
) -> CheckResult:
    """``run_check`` under ``run.profile`` and (with ``limit``) ``run.timeout``, then the reports.  With ``fault``
    (a failed replay's example, as a sandbox's parent gives it) the failed replay's cause instead:
    :func:`~graphsafe.checker.unreplayable.cause_without_replay`.  ``partial``: see :func:`run_check`."""
    profile = hypothesis_profile(run.profile) if run.profile else contextlib.nullcontext()
    timer = deadline(run.timeout, label or str(target)) if limit else contextlib.nullcontext()
    with profile, timer:
        if fault is None:
            result = run_check(target, check, progress, partial)
        else:
            result = cause_without_replay(target, check, fault)
    if run.report_dir is not None:
        # pruning replays old reports' steps: under the same limit, and a hang there costs no result
        replaying = (
            deadline(run.timeout, f"{label or target}: replaying old reports") if limit else contextlib.nullcontext()
        )
        try:
            with replaying:
                write_reports(result, run.report_dir, target)
        except TargetTimeout as e:
            result.notes.append(f"old reports kept: {one_line(e)}")
    return result


def write_reports(result: CheckResult, report_dir: str | os.PathLike, target: Any = None) -> None:
    """A report for every error finding of ``result`` under ``report_dir``, then the target's old
    reports whose recorded steps now pass removed, each with a note (:func:`graphsafe.reports.prune_stale`;
    ``target``, the checked class or its name, replays them).

    Two pytest-xdist workers may write the same finding: the reports package replaces a report
    atomically, and a writer that loses the race may raise; the other's report then stands.
    """
    for f in result.errors:
        try:
            f.report_dir = str(write_report(f, report_dir))
        except OSError as e:
            existing = report_path(f, report_dir)
            if existing.is_dir():  # the other writer's report
                f.report_dir = str(existing)
            else:  # a report is not worth losing the check result over
                result.notes.append(f"report for {f.kind.value} not written: {one_line(e)}")
    try:
        prune_stale(result, report_dir, target)
    except OSError as e:  # an old report left in place is not worth losing the check result over
        result.notes.append(f"stale reports not removed: {one_line(e)}")

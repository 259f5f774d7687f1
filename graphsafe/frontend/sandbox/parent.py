"""A sandbox: one child process that checks one target, so that a broken backend breaks only itself.

The backends graphsafe examines are broken by definition: a host sync inside capture leaves the
process's CUDA state unusable, an illegal memory access kills the CUDA context, a kernel can spin
forever, a target can segfault its process.  A :class:`Sandbox` is one child process per target
that runs checks and answers with the :class:`~graphsafe.CheckResult`.  The child forks from this
process's fork server (:mod:`.server`: torch and graphsafe already imported, no CUDA), or is
spawned where that server cannot serve it; never forked from this process::

    box = get_sandbox("tests.targets.synthetic:Safe", engine="emulate")
    result = box.check(CheckOptions(examples=10), RunOptions(timeout=60))

``check`` raises

* :class:`~graphsafe.errors.TargetCrashed` when the child dies (exit code or signal, and what it
  usually means; the last Python frame of the target when one was seen),
* :class:`~graphsafe.errors.ContextBroken` when the check raised and left the child's CUDA context
  unusable (an illegal memory access),
* :class:`~graphsafe.errors.TargetTimeout` when no answer comes within ``run.timeout`` seconds (the
  child is then killed: SIGTERM, then SIGKILL),
* :class:`~graphsafe.errors.ReplayHung` (a TargetTimeout) as soon as one replay has run far past every
  replay before it (:mod:`graphsafe.engines.replay_clock`): a kernel that does not end, reported with the
  step whose replay it was, within seconds instead of at the timeout,
* the child's own :class:`~graphsafe.errors.GraphsafeError` (a contract error, graphsafe's own failure).

After a crash or a timeout the next ``check`` starts a fresh child.  On CUDA the child probes its
context after every check; when the check broke it the reply says so, the child exits, and the next
check starts a fresh one.

Targets cross the process boundary by name (:func:`~graphsafe.frontend.sandbox.wire.target_ref`); a
class that does not import back under its name runs in this process instead, and the result says so
in a note.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

from hypothesis import settings

from ...checker import CheckOptions
from ...engines import replay_clock
from ...errors import ContextBroken, ContractError, InternalError, ReplayHung, TargetCrashed, TargetTimeout, UsageError
from ...findings import CheckResult
from .. import threads
from ..inprocess import RunOptions, run_here
from . import server
from .child import child_main, preload_of
from .faults import cause_elsewhere, death_text, hung_error, where_in_dump
from .wire import result_from_text, target_ref

__all__ = ["Sandbox", "START_TIMEOUT_S", "display_name"]

#: how long a child may take to start (import torch, the engine, the target's module)
START_TIMEOUT_S = 120.0


def display_name(target: Any) -> str:
    """How messages name a target: its string, ``cls.name``, or ``module:qualname``."""
    if isinstance(target, str):
        return target
    if isinstance(target, type):
        return getattr(target, "name", None) or f"{target.__module__}:{target.__qualname__}"
    return repr(target)


class Pool(Protocol):
    """What a sandbox tells the pool that owns it (:mod:`graphsafe.frontend.sandbox.pool`)."""

    def using(self, box: Sandbox) -> contextlib.AbstractContextManager[None]: ...

    def started(self, box: Sandbox) -> None: ...


class Sandbox:
    """One child process that runs checks of one target.

    ``target`` is ``'module:Class'``, a registered name, or a class importable
    as ``module:qualname`` (anything else runs in this process, with a note).
    ``engine`` is ``auto``, ``cuda`` or ``emulate``; ``device`` a CUDA device
    index the child makes current (None: the default); ``pool`` the pool that
    keeps it, if any; ``method`` ``auto`` (from the fork server where it
    serves) or ``spawn`` (a cold interpreter every time).

    ``startups`` lists every child's start: ``{"method": "forkserver" or
    "spawn", "seconds": from start() to the child's "ready"}``.
    """

    def __init__(
        self,
        target: Any,
        engine: str = "auto",
        device: int | None = None,
        pool: Pool | None = None,
        method: str = "auto",
    ):
        if method not in server.METHODS:
            raise UsageError(f"sandbox start method {method!r}: choose one of {', '.join(server.METHODS)}")
        self.target = target
        self.method = method
        self.pool = pool
        self.name = display_name(target)
        self.engine = engine
        self.device = device
        self.ref, self.by_class, self.why_not = target_ref(target)
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._fault_path: str | None = None
        self._lifeline: Connection | None = None  # the write end of the child's lifeline (see child._watch_parent)
        self._launched: tuple[str, float] = ("", 0.0)  # how and when (time.time()) the child was started
        self.started = 0  # how many child processes this sandbox has started
        self.startups: list[dict[str, Any]] = []
        self.inherited: dict | None = None  # what the current child inherited from the fork server
        self.threads: int | None = None  # the current child's torch threads (graphsafe.frontend.threads)
        self._clock: replay_clock.Clock | None = None  # the current child's replay clock

    def __repr__(self) -> str:
        state = "in-process" if self.ref is None else (f"pid {self.pid}" if self.alive else "no process")
        return f"<Sandbox {self.name} engine={self.engine} device={self.device} {state}>"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    # -- running a check ----------------------------------------------------------------
    def check(
        self, check: CheckOptions, run: RunOptions, label: str = "", progress: Callable[[Any], None] | None = None
    ) -> CheckResult:
        """:func:`~graphsafe.frontend.inprocess.run_here` in the child; a CheckResult.

        ``run.profile`` is the Hypothesis profile the child loads (None: the profile loaded in
        this process); ``run.timeout`` bounds the check; ``progress`` gets the child's progress
        reports.  See the module docstring for what it raises.
        """
        if run.profile is None:
            run = dataclasses.replace(run, profile=settings.get_current_profile_name())
        if check.engine not in (self.engine, "auto"):
            raise UsageError(
                f"this sandbox runs engine {self.engine!r}; the check asked for {check.engine!r}: "
                "get the sandbox for that engine (get_sandbox(target, engine=...))"
            )
        check = check.replace(engine=self.engine)
        if self.ref is None:
            return self._check_here(check, run, label, progress)
        with self.pool.using(self) if self.pool is not None else contextlib.nullcontext():
            try:
                return self._check_in_child(check, run, label, progress)
            except (ReplayHung, ContextBroken) as err:  # lost to a replay: a fresh process decides its cause
                before = result_from_text(self._partial) if self._partial else None  # earlier phases' findings
                return cause_elsewhere(err, lambda fault: self._check_in_child(check, run, label, None, fault), before)

    def _check_in_child(
        self, check: CheckOptions, run: RunOptions, label: str, progress: Callable[[Any], None] | None, fault=None
    ) -> CheckResult:
        timeout, self._partial = run.timeout, None
        try:
            if not self.alive:
                self.start(wait=False)
            if self._starting:
                self._await_ready(timeout)
            if self._conn is None:  # no child to ask
                raise self._crashed()
            try:
                req = ("check", check, run, label or self.name, progress is not None)
                self._conn.send(req if fault is None else ("cause", *req[1:4], False, fault))  # fault: cause_elsewhere
            except (OSError, ValueError):
                raise self._crashed() from None
            end = time.monotonic() + timeout
            reply = self._wait(timeout)
            while isinstance(reply, tuple) and reply[0] in ("progress", "partial"):
                if reply[0] == "partial":  # the result so far, after a phase that found something
                    self._partial = reply[1]
                elif progress is not None:  # (the child sends progress only when asked)
                    progress(reply[1])
                reply = self._wait(max(end - time.monotonic(), 0.001), deadline_of=timeout)
        except BaseException:
            if self._proc is not None and not (self.alive and self._idle):
                self._discard()
            raise
        broken = bool(reply.get("broken_context"))
        if broken:
            self._discard(graceful=True)
        err = reply.get("error")
        if err is not None:
            if broken and isinstance(err, ContextBroken):  # a replay faulted: the error names the example
                raise ContextBroken(
                    f"{self.name}: {err.message}; its process was discarded",
                    **{n: getattr(err, n) for n in err._fields},
                )
            if broken and not isinstance(err, (UsageError, ContractError)):
                first = err.message.strip().splitlines()
                raise ContextBroken(
                    f"{self.name}: the check raised {type(err).__name__}: {first[0] if first else ''}, and the "
                    "process's CUDA context was unusable afterwards (an illegal memory access or a failed capture "
                    "on the device); its process was discarded",
                    where=getattr(err, "where", ""),
                )
            raise err
        result = result_from_text(reply["result"])
        result.notes.extend(n for n in reply.get("notes", []) if n not in result.notes)
        if broken:
            result.notes.append(
                "the check left its process's CUDA context unusable; graphsafe discarded that process, "
                "and the next check of this target starts a fresh one"
            )
        return result

    _idle = False
    _starting = False
    _partial: str | None = None  # the running check's result so far (result_to_text), from its child

    @property
    def idle(self) -> bool:
        """True while the child waits for a request (or is still starting): safe to close."""
        return self._idle or self._starting

    def _check_here(self, check: CheckOptions, run: RunOptions, label: str, progress) -> CheckResult:
        result = run_here(self.target, check, run, label=label or self.name, progress=progress)
        result.notes.append(
            f"{self.why_not}; it ran in this process without isolation (move the class to module level to isolate it)"
        )
        return result

    def start(self, wait: bool = True, timeout: float = START_TIMEOUT_S) -> None:
        """Start the child process now (a no-op while one is alive, or for in-process targets).

        With ``wait=False`` it returns at once and the child imports torch and
        the target while this process does something else; the next ``check``
        waits for it.
        """
        if self.ref is None or self.alive:
            if wait and self._starting:
                self._await_ready(timeout)
            return
        self._discard()
        ctx, how = server.context_for(self.engine, self.method, preload=preload_of(self.target))
        parent, child = ctx.Pipe(duplex=True)
        lifeline, self._lifeline = ctx.Pipe(duplex=False)
        env = threads.child_environment(dict(os.environ))  # (a forked child's is the server's until it takes this)
        self._clock = replay_clock.Clock(
            ctx.RawArray("d", replay_clock.NUMBERS), ctx.RawArray("c", replay_clock.PLAN_BYTES)
        )
        proc = ctx.Process(
            target=child_main,
            args=(child, self.ref, self.by_class, self.engine, self.device, lifeline, env, self._clock),
            name=f"graphsafe-sandbox[{self.name}]",
            daemon=True,
        )
        self._launched = (how, time.time())
        with server.no_main_module():
            proc.start()
        child.close()
        lifeline.close()
        self._proc, self._conn = proc, parent
        self.started += 1
        self._starting = True
        if self.pool is not None:
            self.pool.started(self)
        if wait:
            self._await_ready(timeout)

    def _await_ready(self, timeout: float) -> None:
        try:
            msg = self._wait(max(float(timeout), START_TIMEOUT_S), starting=True)
            if isinstance(msg, tuple) and msg and msg[0] == "fault":  # first: where its stack dumps go
                self._fault_path = msg[1]
                msg = self._wait(max(float(timeout), START_TIMEOUT_S), starting=True)
        except BaseException:
            self._starting = False
            raise
        self._starting = False
        if not (isinstance(msg, tuple) and msg and msg[0] == "ready"):
            self._discard()
            raise InternalError(f"{self.name}: the sandbox process sent {msg!r} instead of 'ready'")
        self._idle = True
        how, when = self._launched
        info = msg[2] if len(msg) > 2 and isinstance(msg[2], dict) else {}
        self.inherited = info.get("inherited")
        self.threads = info.get("threads")
        self.startups.append({"method": how, "seconds": round(float(info.get("time", time.time())) - when, 4)})
        why = server.mismatch(self.inherited, self.engine) if how == "forkserver" else ""
        if why:  # this child is not what a spawned one would be: spawn from now on
            server.stop_using(why)
            self.startups[-1]["discarded"] = why
            self._discard()
            self.start(wait=True, timeout=timeout)

    def _wait(self, timeout: float, starting: bool = False, deadline_of: float | None = None) -> Any:
        """The next message from the child within ``timeout`` seconds; TargetCrashed / TargetTimeout otherwise
        (``deadline_of``: the whole check's timeout, which the message names)."""
        self._idle = False
        conn, proc = self._conn, self._proc
        if conn is None or proc is None:  # no child to wait for
            raise self._crashed()
        deadline = time.monotonic() + float(timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._timed_out(deadline_of or timeout, starting)
            ready = wait_for([conn, proc.sentinel], timeout=min(left, 1.0))
            if conn in ready or conn.poll(0):
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    raise self._crashed() from None
                except Exception as e:  # noqa: BLE001 - a message cut short by the child's death
                    raise self._crashed(f" (its last message was cut short: {type(e).__name__})") from None
                self._idle = not (isinstance(msg, tuple) and msg and msg[0] in ("progress", "partial"))  # checking
                return msg
            if proc.sentinel in ready:
                raise self._crashed()
            hung = self._clock.overdue() if self._clock is not None and not starting else None
            if hung is not None:
                raise self._hung(hung, deadline_of or timeout)

    def _crashed(self, extra: str = "") -> TargetCrashed:
        proc = self._proc
        if proc is not None:
            proc.join(5)
        code = None if proc is None else proc.exitcode
        where = where_in_dump(self._read_fault())
        what = death_text(code) + extra
        if where:
            what += f"; last Python frame: {where}"
        self._discard()
        return TargetCrashed(f"{self.name}: {what}", exitcode=code, where=where)

    def _timed_out(self, timeout: float, starting: bool) -> TargetTimeout:
        where = self._stack_dump()
        self._discard()
        if starting:
            what = (
                f"the sandbox process did not start within {timeout:g} s (importing torch, the engine "
                "or the target's module hangs); its process was killed"
            )
        else:
            what = f"no result within {timeout:g} s: {TargetTimeout.CAUSES}; its process was killed"
        if where:
            what += f"; it was in {where}"
        return TargetTimeout(f"{self.name}: {what}", timeout=timeout, where=where)

    def _hung(self, hung: dict, timeout: float) -> ReplayHung:
        where = self._stack_dump()
        self._discard()
        return hung_error(self.name, hung, where, timeout)

    def _stack_dump(self) -> str:
        """Where the child is, from every thread's stack it writes on SIGUSR1 ('' if it cannot say)."""
        pid = self._proc.pid if self._proc is not None and self._proc.is_alive() else None
        if pid is None or not hasattr(signal, "SIGUSR1"):
            return ""
        before = self._fault_size()
        try:
            os.kill(pid, signal.SIGUSR1)  # faulthandler: dump every thread's stack
        except OSError:
            return ""
        end = time.monotonic() + 2.0
        while time.monotonic() < end and self._fault_size() == before:
            time.sleep(0.05)
        time.sleep(0.1)
        return where_in_dump(self._read_fault())

    def _fault_size(self) -> int:
        try:
            return os.path.getsize(self._fault_path) if self._fault_path else 0
        except OSError:
            return 0

    def _read_fault(self) -> str:
        if not self._fault_path:
            return ""
        try:
            with open(self._fault_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    # -- stopping ------------------------------------------------------------------------
    def _discard(self, graceful: bool = False) -> None:
        """Stop the child (if any) and forget it; the next check starts a fresh one."""
        proc, conn, lifeline = self._proc, self._conn, self._lifeline
        self._proc = self._conn = self._lifeline = None
        self._idle = self._starting = False
        if proc is not None:
            if graceful:
                proc.join(5)
            if proc.is_alive():
                proc.terminate()
                proc.join(3)
            if proc.is_alive():
                proc.kill()
                proc.join(3)
            try:
                proc.close()
            except ValueError:  # still running (stuck in the driver): leave it to the OS
                pass
        for end in (conn, lifeline):  # the lifeline last: a child still unwinding has finished or was killed
            if end is not None:
                with contextlib.suppress(OSError):
                    end.close()
        if self._fault_path:
            try:
                os.unlink(self._fault_path)
            except OSError:
                pass
            self._fault_path = None

    def close(self) -> None:
        """Ask the child to exit, then make sure it did."""
        if self._conn is not None and self.alive and (self._idle or self._starting):
            try:
                self._conn.send(("close",))
            except (OSError, ValueError):
                pass
            if self._proc is not None:
                self._proc.join(2)
        self._discard()

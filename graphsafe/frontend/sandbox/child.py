"""The sandbox child: a process that checks one target, request after request, until told to stop.

It ignores Ctrl-C (the parent decides), unwinds on SIGTERM (so a report being written removes its
temporary directory), writes every thread's stack to a file on a fatal signal or SIGUSR1 (the
parent reads it to say where a crashed or hung target was), exits when its parent is gone (its
lifeline, a pipe only the parent holds open, closes), and after every check tells the parent
whether its CUDA context still works.  Forked from the fork server (:mod:`.server`), it takes the
parent's environment first, and reports what it inherited from the server when it is ready.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import importlib
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
from typing import Any

import torch
from hypothesis import settings

from ...checker import lookup
from ...engines import replay_clock
from ...engines.cuda import CudaEngine
from ...errors import GraphsafeError, internal
from .. import threads
from ..devices import prepare_engine
from ..inprocess import run_here
from ..options import register_profiles
from .server import PRELOAD, PRELOAD_ENV
from .wire import result_to_text

__all__ = ["child_main", "cuda_context_ok", "PRELOAD", "PRELOAD_ENV", "preload_of"]


def preload_of(target: Any) -> tuple[str, ...]:
    """The modules ``target`` (a class or a name) asks the fork server to import: its ``preload``."""
    with contextlib.suppress(Exception):  # a target that does not resolve fails in its check, reported
        cls = lookup(target) if isinstance(target, str) else target
        return tuple(getattr(cls, "preload", ()) or ())
    return ()


def cuda_context_ok() -> bool:
    """False when this process's CUDA context can no longer run work; True without CUDA.

    Never initialises CUDA: a process that has not used it yet is fine.  The probe itself is
    :meth:`CudaEngine.healthy` (an open capture, a tiny op, and the random generator, which a
    failed capture can leave in capture mode).
    """
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return True
    try:
        return CudaEngine().healthy()
    except Exception:  # noqa: BLE001 - even asking failed: the context is gone
        return False


def _watch_parent(lifeline, fault_path: str) -> None:
    """Exit when the parent is gone (SIGKILLed parents do not clean up their children, or their files).

    ``lifeline`` is the read end of a pipe whose write end only the parent holds and never writes:
    it turns readable (end of file) when the parent closes it or dies.  (A child forked from the
    fork server is the server's child, so its parent process id says nothing about the parent.)
    """

    def watch() -> None:
        with contextlib.suppress(OSError, EOFError):
            lifeline.poll(None)
        with contextlib.suppress(OSError):
            os.unlink(fault_path)
        os._exit(1)

    threading.Thread(target=watch, name="graphsafe-sandbox-parent-watch", daemon=True).start()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # KeyboardInterrupt, not SystemExit: Hypothesis takes a SystemExit raised inside an example for
    # a failure and goes on shrinking (back into the hang); KeyboardInterrupt stops it and check()
    try:  # the parent has given up on this process: what it prints while unwinding is noise
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
    except OSError:
        pass
    raise KeyboardInterrupt


def _warm_up(ref: str) -> None:
    """Import now what every first check imports, so that a check's timeout is the check's time."""
    # torch._dynamo: imported by torch on the first operation under graphsafe's recorder (seconds)
    with contextlib.suppress(Exception):
        importlib.import_module("torch._dynamo")
    with contextlib.suppress(Exception):  # whatever fails here fails again, reported, in the check
        for module in preload_of(ref):  # its library, unless the fork server imported it
            importlib.import_module(module)


def _inherited() -> dict | None:
    """What the fork server had imported and set up when this process forked from it (None if spawned)."""
    state = getattr(sys.modules.get(PRELOAD), "STATE", None)
    return dict(state) if state and state.get("pid") != os.getpid() else None


def child_main(
    conn,
    ref: str,
    by_class: bool,
    engine: str,
    device: Any,
    lifeline,
    env: dict | None,
    clock: replay_clock.Clock | None = None,
) -> None:
    """The child process's entry point (``multiprocessing`` target).  ``env``: the parent's environment
    (a forked child's is the server's until then), with the torch threads it should use; ``clock``: where its
    replays are timed for the parent (:mod:`graphsafe.engines.replay_clock`)."""
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    threads.apply_from_environment()  # the host's cores shared by the checks at once (set by the parent)
    # Ctrl-C reaches the whole process group: the parent decides what happens to this process
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # where faulthandler writes every thread's stack on a fatal signal (and on SIGUSR1: the parent asks
    # before it kills a hung process).  Created here and removed on every way out this process controls;
    # after a fatal signal the parent reads it, then removes it.
    fd, fault_path = tempfile.mkstemp(prefix="graphsafe-sandbox-", suffix=".txt")
    code = 0
    try:
        fault = os.fdopen(fd, "w")
        _watch_parent(lifeline, fault_path)
        conn.send(("fault", fault_path))
        faulthandler.enable(fault, all_threads=True)
        if hasattr(signal, "SIGUSR1"):
            faulthandler.register(signal.SIGUSR1, fault, all_threads=True)
        os.environ["GRAPHSAFE_SANDBOX"] = "1"
        replay_clock.install(clock)
        prepare_engine(engine)  # before the target's module defines its Triton kernels
        warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype feature")
        if device is not None and engine != "emulate":
            torch.cuda.set_device(device)
        register_profiles()
        _warm_up(ref)
        info = {"time": time.time(), "inherited": _inherited(), "threads": torch.get_num_threads()}
        conn.send(("ready", os.getpid(), info))
        _serve(conn, ref, by_class)
    except KeyboardInterrupt:  # SIGTERM from the parent, after unwinding (temporary report dirs removed)
        code = 128 + signal.SIGTERM
    except (EOFError, OSError):  # the parent went away
        code = 1
    finally:
        with contextlib.suppress(OSError):
            os.unlink(fault_path)
    if code:
        os._exit(code)


def _serve(conn, ref: str, by_class: bool) -> None:
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        if not isinstance(req, tuple) or req[0] not in ("check", "cause"):
            return
        # ("cause", ..., fault): a failed replay's cause, decided without replaying it (a fresh process's first request)
        fault = req[5] if req[0] == "cause" else None
        reply = _run_request(ref, by_class, req[1], req[2], req[3], conn if req[4] else None, fault, conn)
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return
        if reply.get("broken_context"):
            return  # the next request gets a fresh process


def _run_request(
    ref: str, by_class: bool, check, run, label: str, progress_to, fault=None, conn=None
) -> dict[str, Any]:
    reply: dict[str, Any] = {"notes": []}
    if run.profile:
        try:
            settings.get_profile(run.profile)
        except Exception:  # noqa: BLE001 - a profile registered only in the parent (a conftest of its own)
            reply["notes"].append(
                f"the Hypothesis profile {run.profile!r} is not registered in the sandbox "
                "process; it ran with Hypothesis' default settings"
            )
            run = dataclasses.replace(run, profile="default")
    try:
        target: Any = lookup(ref) if by_class else ref
        # the parent keeps the time: it kills this process when the check overruns
        report = (lambda p: progress_to.send(("progress", p))) if progress_to is not None else None
        # the result so far after each phase that found something: the parent keeps it, should a later replay hang
        partial = (lambda r: conn.send(("partial", result_to_text(r)))) if conn is not None else None
        result = run_here(target, check, run, label=label, limit=False, progress=report, fault=fault, partial=partial)
        reply["result"] = result_to_text(result)
    except GraphsafeError as e:
        reply["error"] = e
    except Exception as e:  # noqa: BLE001 - graphsafe's own failure goes back to the parent whole
        reply["error"] = internal(e)
    reply["broken_context"] = not cuda_context_ok()
    return reply

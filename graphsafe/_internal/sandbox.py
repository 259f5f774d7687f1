"""Run each target's checks in a child process of its own, so that a broken backend breaks only itself.

The backends graphsafe examines are broken by definition: a host sync inside
capture leaves the process's CUDA state unusable, an illegal memory access
kills the CUDA context, a kernel can spin forever, a target can segfault its
process.  A :class:`Sandbox` is one child process (``multiprocessing``'s
``spawn`` context, never ``fork``) per target that runs ``graphsafe.check``
requests and answers with the :class:`~graphsafe.CheckResult` as plain JSON
(findings through :func:`graphsafe.reports.jsonio.finding_to_data`; no torch
object crosses the pipe)::

    box = get_sandbox("tests.synthetic:Safe", engine="emulate")
    result = box.check(60, examples=10, probes=["stale-pointer"])   # a CheckResult

``check`` raises

* :class:`SandboxCrashed` when the child dies (exit code or signal, and what
  it usually means; the last Python frame of the target when one was seen),
* :class:`ContextBroken` (a :class:`SandboxCrashed`) when the check raised and
  left the process's CUDA context unusable (an illegal memory access),
* :class:`SandboxTimeout` when no answer comes within ``timeout`` seconds (the
  child is then killed: SIGTERM, then SIGKILL),
* :class:`graphsafe.TargetError` with the child's message for contract errors,
  and the child's exception type (or :class:`SandboxError`) for anything else.

After a crash or a timeout the next ``check`` starts a fresh child.  On CUDA
the child probes its context after every check; when the check broke it the
reply says so, the child exits, and the next check starts a fresh one.

Targets cross the process boundary by name: ``'module:Class'`` or a registered
name.  A class is sent as ``'module:qualname'`` when that name imports back to
the same class; a class that does not (defined inside a function, or in the
``__main__`` script) runs in this process instead, and the result says so in a
note.

:func:`get_sandbox` keeps one sandbox per (target, engine, device) for the
life of the process, so that a target's many pytest items share one child; the
children are terminated at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import inspect
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
import types
from typing import Any

__all__ = [
    "Sandbox",
    "SandboxCrashed",
    "SandboxTimeout",
    "ContextBroken",
    "SandboxError",
    "get_sandbox",
    "close_all",
    "target_ref",
    "worker_device",
    "cuda_context_ok",
    "result_to_data",
    "result_from_data",
]

#: how long a child may take to start (import torch, the engine, the target's module)
START_TIMEOUT_S = 120.0


class SandboxCrashed(RuntimeError):
    """The target's sandbox process died before answering.

    ``target`` names the target, ``what`` says what happened (without the
    target's name), ``exitcode`` is the process's exit code (negative: the
    signal), ``where`` the last Python frame of the target seen (or '').
    """

    def __init__(self, target: str, what: str | None = None, *, exitcode: int | None = None, where: str = ""):
        if what is None:  # SandboxCrashed("message")
            target, what = "", target
        super().__init__(f"{target}: {what}" if target else what)
        self.target, self.what, self.exitcode, self.where = target, what, exitcode, where


class ContextBroken(SandboxCrashed):
    """The check raised and left its process's CUDA context unusable; the process was discarded."""


class SandboxTimeout(RuntimeError):
    """No answer within the timeout; the sandbox process was killed."""

    def __init__(self, target: str, what: str | None = None, *, timeout: float = 0.0, where: str = ""):
        if what is None:  # SandboxTimeout("message")
            target, what = "", target
        super().__init__(f"{target}: {what}" if target else what)
        self.target, self.what, self.timeout, self.where = target, what, timeout, where


class SandboxError(RuntimeError):
    """The check raised, in the sandbox, an exception that has no counterpart here (a graphsafe bug)."""


# -- what a signal usually means ------------------------------------------------------------
_SIGNAL_MEANING = {
    "SIGSEGV": "an illegal memory access or a bad pointer",
    "SIGBUS": "a misaligned or unmapped memory access",
    "SIGABRT": "native code called abort() (a failed C++/CUDA assertion or an uncaught C++ exception)",
    "SIGFPE": "an arithmetic fault (an integer division by zero)",
    "SIGILL": "an illegal instruction (code built for another CPU, or a corrupted jump)",
    "SIGKILL": "it was killed from outside, most often by the kernel's out-of-memory killer",
    "SIGTERM": "it was terminated from outside",
}


def _death_text(exitcode: int | None) -> str:
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


# -- targets by name ------------------------------------------------------------------------
def target_ref(target: Any) -> tuple[str | None, bool, str]:
    """``(name the child can load, check the class rather than the name?, why not)`` for a target.

    A string is sent as is.  A class is sent as ``'module:qualname'`` when that
    imports back to the very same class; otherwise the name is None and the
    third item says why (the caller then runs the check in its own process).
    """
    if isinstance(target, str):
        return target, False, ""
    if not inspect.isclass(target):
        return None, False, f"a {type(target).__name__} is not a target class or name"
    mod, qual = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
    label = f"{mod}:{qual}"
    if "<locals>" in qual:
        return None, True, f"the target {label} is defined inside a function, so a sandbox process cannot import it"
    if mod in (None, "__main__", "__mp_main__", "builtins"):
        return None, True, f"the target {label} is defined in the __main__ script, so a sandbox process cannot import it"
    obj: Any = sys.modules.get(mod)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    if obj is not target:
        return None, True, f"the target {label} does not import back under that name, so a sandbox process cannot load it"
    # check(cls) names the result cls.name when the class has one, check("module:Class") by that string:
    # only then must the child pass the class itself
    return label, bool(getattr(target, "name", None)), ""


def _display_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    if inspect.isclass(target):
        return getattr(target, "name", None) or f"{target.__module__}:{target.__qualname__}"
    return repr(target)


# -- devices and CUDA health ----------------------------------------------------------------
def worker_device(engine: str) -> int | None:
    """The GPU an xdist worker's sandboxes should use (worker index % GPU count), without touching CUDA here.

    Like :func:`graphsafe._internal.xdist.assign_device`, but nothing is made
    current in this process: the sandbox child does that, so the pytest process
    never gets a CUDA context.  None outside xdist, on the emulator, or without CUDA.
    """
    from . import frontend
    from .xdist import worker_index

    idx = worker_index()
    if idx is None or engine == "emulate" or not frontend.cuda_available():
        return None
    import torch

    key = "PYTORCH_NVML_BASED_CUDA_CHECK"
    prev = os.environ.get(key)
    os.environ[key] = "1"  # count through NVML: no CUDA initialisation in this process
    try:
        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return None
    finally:
        if prev is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = prev
    return idx % count if count > 0 else None


def cuda_context_ok() -> bool:
    """False when this process's CUDA context can no longer run work; True without CUDA.

    Never initialises CUDA: a process that has not used it yet is fine.  The
    probe itself is :meth:`CudaEngine.healthy` (an open capture, a tiny op and
    the random generator, which a failed capture can leave in capture mode).
    """
    try:
        import torch

        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return True
    except Exception:  # noqa: BLE001
        return True
    from ..engines.cuda import CudaEngine

    try:
        return CudaEngine().healthy()
    except Exception:  # noqa: BLE001 - even asking failed: the context is gone
        return False


# -- CheckResult <-> plain JSON -------------------------------------------------------------
def result_to_data(result: Any) -> dict[str, Any]:
    """A :class:`~graphsafe.CheckResult` as plain data (findings via ``finding_to_data``)."""
    from ..findings import CheckResult
    from ..reports.jsonio import finding_to_data, plain

    out: dict[str, Any] = {}
    for fl in dataclasses.fields(CheckResult):
        v = getattr(result, fl.name)
        if fl.name == "spec":
            out["spec"] = v.to_dict() if v is not None else None
        elif fl.name == "findings":
            out["findings"] = [{"data": finding_to_data(f), "report_dir": f.report_dir} for f in v]
        else:
            out[fl.name] = plain(v)
    return plain(out)


def result_from_data(data: dict[str, Any]) -> Any:
    """Rebuild a :class:`~graphsafe.CheckResult` from :func:`result_to_data`'s data."""
    from ..contract import CaptureSpec
    from ..findings import CheckResult
    from ..reports.jsonio import finding_from_data

    kw: dict[str, Any] = {}
    names = {fl.name for fl in dataclasses.fields(CheckResult)}
    for k, v in data.items():
        if k not in names:
            continue
        if k == "spec":
            v = CaptureSpec.from_dict(v) if v is not None else None
        elif k == "findings":
            v = [finding_from_data(f["data"], report_dir=f.get("report_dir") or "") for f in v]
        elif k == "probes":
            v = tuple(v)
        elif k == "notes":
            v = list(v)
        kw[k] = v
    return CheckResult(**kw)


def _dumps(data: Any) -> str:
    from ..reports.jsonio import plain

    return json.dumps(plain(data), allow_nan=False)


def _loads(text: str) -> Any:
    from ..reports.jsonio import loads

    return loads(text)


_SPEC_TAG = "$capture_spec"


def _encode_kwargs(kwargs: dict[str, Any]) -> str:
    """check()'s keyword arguments as JSON text; a TypeError names any that cannot cross processes."""
    from ..contract import CaptureSpec

    out: dict[str, Any] = {}
    for k, v in kwargs.items():
        if k == "engine":
            raise TypeError("Sandbox.check(): pass engine to Sandbox(...) (or get_sandbox), not to check()")
        if k == "device" and v is not None and not isinstance(v, (str, int)):
            v = str(v)  # torch.device("cuda:1") -> "cuda:1"
        if k == "spec" and isinstance(v, CaptureSpec):
            out[k] = {_SPEC_TAG: v.to_dict()}
            continue
        if k == "database" and v is not None and v is not False:
            path = getattr(v, "path", v)  # a DirectoryBasedExampleDatabase travels as its directory
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(
                    f"Sandbox.check(): database={v!r} cannot be sent to a sandbox process; "
                    "pass a directory path, None or False"
                )
            out[k] = {"$database": os.fspath(path)}
            continue
        if isinstance(v, (set, frozenset, tuple)):
            v = sorted(v) if isinstance(v, (set, frozenset)) else list(v)
        if isinstance(v, os.PathLike):
            v = os.fspath(v)
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError):
            raise TypeError(
                f"Sandbox.check(): {k}={v!r} cannot be sent to a sandbox process; pass plain values "
                "(numbers, strings, lists) or run without isolation"
            ) from None
        out[k] = v
    return json.dumps(out)


def _decode_kwargs(text: str) -> dict[str, Any]:
    from ..contract import CaptureSpec

    kw = json.loads(text)
    for k, v in list(kw.items()):
        if isinstance(v, dict) and _SPEC_TAG in v:
            kw[k] = CaptureSpec.from_dict(v[_SPEC_TAG])
        elif isinstance(v, dict) and "$database" in v:
            from hypothesis.database import DirectoryBasedExampleDatabase

            kw[k] = DirectoryBasedExampleDatabase(v["$database"])
    return kw


def _exception_data(e: BaseException) -> dict[str, Any]:
    from ..contract import is_contract_error

    return {
        "type": type(e).__name__,
        "module": type(e).__module__,
        "message": str(e),
        "contract": is_contract_error(e),
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)),
    }


def _rebuild_exception(err: dict[str, Any], target: str) -> BaseException:
    import builtins

    from ..checker import TargetError

    msg = err.get("message", "")
    if err.get("type") == "TargetError":
        return TargetError(msg)
    cls = getattr(builtins, err.get("type", ""), None)
    if err.get("module") == "builtins" and isinstance(cls, type) and issubclass(cls, Exception):
        try:
            exc = cls(msg)
        except Exception:  # noqa: BLE001 - an exception type with another signature
            exc = SandboxError(f"{err['type']}: {msg}")
    else:
        exc = SandboxError(f"{err.get('type')}: {msg}")
    if err.get("contract"):
        exc._graphsafe_contract = True  # type: ignore[attr-defined]
    tb = err.get("traceback")
    if tb and not err.get("contract"):
        exc.add_note(f"raised in the sandbox process of {target}:\n{tb.rstrip()}")
    return exc


# -- where the target was: faulthandler's dump ----------------------------------------------
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_INFRA = ("torch", "triton", "hypothesis", "numpy", "_pytest", "pytest", "pluggy", "multiprocessing", "xdist", "execnet")


def _is_infra(path: str) -> bool:
    import sysconfig

    p = os.path.abspath(path)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../graphsafe
    if p.startswith(pkg + os.sep):
        return True
    stdlib = sysconfig.get_paths().get("stdlib") or ""
    if stdlib and p.startswith(os.path.abspath(stdlib) + os.sep) and "site-packages" not in p:
        return True
    parts = p.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        i = max(i for i, s in enumerate(parts) if s in ("site-packages", "dist-packages"))
        if i + 1 < len(parts) and parts[i + 1].split(".")[0] in _INFRA:
            return True
    return path.startswith("<")


def _where(dump: str) -> str:
    """The innermost frame of the target's own code in a faulthandler dump ('' when none)."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump)
    main = [b for b in blocks if " in _serve" in b] or blocks
    frames = [m.groupdict() for line in main[0].splitlines() if (m := _FRAME.match(line))]
    if not frames:
        return ""
    pick = next((f for f in frames if not _is_infra(f["file"])), None)
    if pick is None:
        # only graphsafe / library frames: the innermost graphsafe frame says what it was doing
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        pick = next((f for f in frames if os.path.abspath(f["file"]).startswith(pkg + os.sep)), frames[0])
    path = pick["file"]
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    except ValueError:
        pass
    return f"{path}:{pick['line']} in {pick['func']}"


# -- the child ------------------------------------------------------------------------------
def _watch_parent(parent_pid: int, fault_path: str) -> None:
    """Exit when the parent is gone (SIGKILLed parents do not clean up their children, or their files)."""

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                with contextlib.suppress(OSError):
                    os.unlink(fault_path)
                os._exit(1)

    threading.Thread(target=watch, name="graphsafe-sandbox-parent-watch", daemon=True).start()


def _exit_on_sigterm(signum, frame) -> None:
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
    import importlib

    # torch._dynamo: imported by torch on the first operation under graphsafe's recorder (seconds)
    for mod in ("graphsafe.checker", "strategies", "torch._dynamo"):
        try:
            importlib.import_module(mod)
        except Exception:  # noqa: BLE001 - whatever fails here fails again, reported, in the check
            pass
    try:
        from ..registry import lookup

        lookup(ref)  # the target's module and its kernels
    except Exception:  # noqa: BLE001
        pass


def _child_main(conn, ref: str, by_class: bool, engine: str, device: Any, parent_pid: int) -> None:
    # Ctrl-C reaches the whole process group: the parent decides what happens to this process
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the parent stops this process with SIGTERM (SIGKILL 3 s later): unwind, so that a report being
    # written removes its temporary directory
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    import faulthandler

    # where faulthandler writes every thread's stack on a fatal signal (and on SIGUSR1: the parent asks
    # before it kills a hung process).  Created here and removed on every way out this process controls;
    # after a fatal signal the parent reads it, then removes it.
    fd, fault_path = tempfile.mkstemp(prefix="graphsafe-sandbox-", suffix=".txt")
    code = 0
    try:
        fault = os.fdopen(fd, "w")
        _watch_parent(parent_pid, fault_path)
        conn.send(("fault", fault_path))
        faulthandler.enable(fault, all_threads=True)
        if hasattr(signal, "SIGUSR1"):
            faulthandler.register(signal.SIGUSR1, fault, all_threads=True)
        os.environ["GRAPHSAFE_SANDBOX"] = "1"

        import warnings

        from . import frontend

        frontend.prepare_engine(engine)  # before the target's module defines its Triton kernels
        warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype feature")
        if device is not None and engine != "emulate":
            import torch

            torch.cuda.set_device(device)
        frontend.register_profiles()
        _warm_up(ref)
        conn.send(("ready", os.getpid()))
        _serve(conn, ref, by_class, engine)
    except KeyboardInterrupt:  # SIGTERM from the parent, after unwinding (temporary report dirs removed)
        code = 128 + signal.SIGTERM
    except (EOFError, OSError):  # the parent went away
        code = 1
    finally:
        with contextlib.suppress(OSError):
            os.unlink(fault_path)
    if code:
        os._exit(code)


def _serve(conn, ref: str, by_class: bool, engine: str) -> None:
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        if not isinstance(req, tuple) or req[0] != "check":
            return
        reply = _run_request(req[1], ref, by_class, engine)
        try:
            conn.send(_dumps(reply))
        except (OSError, ValueError):
            return
        if reply.get("broken_context"):
            return  # the next request gets a fresh process


def _run_request(payload: dict, ref: str, by_class: bool, engine: str) -> dict[str, Any]:
    from hypothesis import settings

    from . import frontend

    reply: dict[str, Any] = {"notes": []}
    try:
        kwargs = _decode_kwargs(payload["kwargs"])
        profile = payload.get("profile")
        if profile:
            try:
                settings.get_profile(profile)
            except Exception:  # noqa: BLE001 - a profile registered only in the parent
                reply["notes"].append(
                    f"the Hypothesis profile {profile!r} is not registered in the sandbox process; "
                    "it ran with Hypothesis' default settings"
                )
                profile = "default"
        target: Any = ref
        if by_class:
            from ..registry import lookup

            target = lookup(ref)
        if profile:
            with frontend.hypothesis_profile(profile):
                result = frontend.run_check(target, engine=engine, **kwargs)
        else:
            result = frontend.run_check(target, engine=engine, **kwargs)
        reply["result"] = result_to_data(result)
    except Exception as e:  # noqa: BLE001 - everything goes back to the parent
        reply["error"] = _exception_data(e)
    reply["broken_context"] = _context_broken()
    return reply


def _context_broken() -> bool:
    """After a check: has this process's CUDA context become unusable?  (False when CUDA was never used.)"""
    return not cuda_context_ok()


# -- the parent -----------------------------------------------------------------------------
@contextlib.contextmanager
def _no_main_module():
    """Hide ``__main__`` from multiprocessing while a child starts.

    ``spawn`` re-runs the parent's main script in the child unless it is
    guarded by ``if __name__ == "__main__"``; the child needs nothing from it
    (targets from ``__main__`` run in-process, see :func:`target_ref`), so it
    is not sent at all.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


class Sandbox:
    """One child process that runs ``graphsafe.check`` for one target.

    ``target`` is ``'module:Class'``, a registered name, or a class importable
    as ``module:qualname`` (anything else runs in this process, with a note).
    ``engine`` is ``auto``, ``cuda`` or ``emulate``; ``device`` a CUDA device
    index the child makes current (None: the default).
    """

    def __init__(self, target: Any, engine: str = "auto", device: int | None = None):
        self.target = target
        self.name = _display_name(target)
        self.engine = engine
        self.device = device
        self.ref, self.by_class, self.why_not = target_ref(target)
        self._proc = None
        self._conn = None
        self._fault_path: str | None = None
        self.started = 0  # how many child processes this sandbox has started

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
    def check(self, timeout: float, *, profile: str | None = None, **check_kwargs: Any) -> Any:
        """``graphsafe.check(target, engine=..., **check_kwargs)`` in the child; a CheckResult.

        ``profile`` is the Hypothesis profile the child loads (default: the
        profile loaded in this process).  See the module docstring for what it raises.
        """
        if profile is None:
            from hypothesis import settings

            profile = settings.get_current_profile_name()
        if self.ref is None:
            return self._check_here(profile, check_kwargs)
        payload = {"kwargs": _encode_kwargs(check_kwargs), "profile": profile}
        _touch(self)
        try:
            if not self.alive:
                self.start(wait=False)
            if self._starting:
                self._await_ready(timeout)
            try:
                self._conn.send(("check", payload))
            except (OSError, ValueError):
                raise self._crashed() from None
            text = self._wait(timeout)
        except BaseException:
            if self._proc is not None and not (self.alive and self._idle):
                self._discard()
            raise
        reply = _loads(text)
        broken = bool(reply.get("broken_context"))
        if broken:
            self._discard(graceful=True)
        err = reply.get("error")
        if err is not None:
            if broken and err.get("type") != "TargetError":
                first = (err.get("message") or "").strip().splitlines()
                raise ContextBroken(
                    self.name,
                    f"the check raised {err.get('type')}: {first[0] if first else ''}, and the process's CUDA "
                    "context was unusable afterwards (an illegal memory access or a failed capture on the "
                    "device); its process was discarded",
                )
            raise _rebuild_exception(err, self.name)
        result = result_from_data(reply["result"])
        result.notes.extend(n for n in reply.get("notes", []) if n not in result.notes)
        if broken:
            result.notes.append(
                "the check left its process's CUDA context unusable; graphsafe discarded that process, "
                "and the next check of this target starts a fresh one"
            )
        return result

    _idle = False
    _starting = False

    def _check_here(self, profile: str, kwargs: dict[str, Any]) -> Any:
        from . import frontend

        with frontend.hypothesis_profile(profile):  # as the child would
            result = frontend.run_check(self.target, engine=self.engine, **kwargs)
        result.notes.append(f"{self.why_not}; it ran in this process without isolation "
                            "(move the class to module level to isolate it)")
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
        import multiprocessing as mp

        self._discard()
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=_child_main,
            args=(child, self.ref, self.by_class, self.engine, self.device, os.getpid()),
            name=f"graphsafe-sandbox[{self.name}]",
            daemon=True,
        )
        with _no_main_module():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.started += 1
        self._starting = True
        _touch(self)
        _limit_live(keep=self)
        if wait:
            self._await_ready(timeout)

    def _start(self, timeout: float = START_TIMEOUT_S) -> None:
        self.start(wait=True, timeout=timeout)

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
            raise SandboxError(f"{self.name}: the sandbox process sent {msg!r} instead of 'ready'")
        self._idle = True

    def _wait(self, timeout: float, starting: bool = False) -> Any:
        """The next message from the child; SandboxCrashed / SandboxTimeout otherwise."""
        from multiprocessing.connection import wait

        self._idle = False
        deadline = time.monotonic() + float(timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._timed_out(timeout, starting)
            ready = wait([self._conn, self._proc.sentinel], timeout=min(left, 1.0))
            if self._conn in ready or self._conn.poll(0):
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    raise self._crashed() from None
                except Exception as e:  # noqa: BLE001 - a message cut short by the child's death
                    raise self._crashed(f" (its last message was cut short: {type(e).__name__})") from None
                self._idle = True
                return msg
            if self._proc.sentinel in ready:
                raise self._crashed()

    def _crashed(self, extra: str = "") -> SandboxCrashed:
        proc = self._proc
        if proc is not None:
            proc.join(5)
        code = None if proc is None else proc.exitcode
        where = _where(self._read_fault())
        what = _death_text(code) + extra
        if where:
            what += f"; last Python frame: {where}"
        self._discard()
        return SandboxCrashed(self.name, what, exitcode=code, where=where)

    def _timed_out(self, timeout: float, starting: bool) -> SandboxTimeout:
        where = ""
        if self._proc is not None and self._proc.is_alive() and hasattr(signal, "SIGUSR1"):
            before = self._fault_size()
            try:
                os.kill(self._proc.pid, signal.SIGUSR1)  # faulthandler: dump every thread's stack
            except OSError:
                pass
            end = time.monotonic() + 2.0
            while time.monotonic() < end and self._fault_size() == before:
                time.sleep(0.05)
            time.sleep(0.1)
            where = _where(self._read_fault())
        self._discard()
        if starting:
            what = (f"the sandbox process did not start within {timeout:g} s (importing torch, the engine "
                    "or the target's module hangs); its process was killed")
        else:
            what = (f"no result within {timeout:g} s: the target hangs (an endless kernel or a blocking call); "
                    "its process was killed")
        if where:
            what += f"; it was in {where}"
        return SandboxTimeout(self.name, what, timeout=timeout, where=where)

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
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
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
        if conn is not None:
            try:
                conn.close()
            except OSError:
                pass
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
            self._proc.join(2)
        self._discard()


# -- one sandbox per (target, engine, device) in this process -------------------------------
_SANDBOXES: dict[tuple, Sandbox] = {}
_LOCK = threading.Lock()
_USE: dict[int, int] = {}  # id(sandbox) -> last use (a counter)
_CLOCK = [0]

#: child processes kept alive at once per process (each holds torch, the target and, on a GPU, a
#: CUDA context); the least recently used idle one is stopped beyond it and restarts when needed
MAX_LIVE = max(1, int(os.environ.get("GRAPHSAFE_SANDBOXES", "3") or 3))


def _touch(box: Sandbox) -> None:
    _CLOCK[0] += 1
    _USE[id(box)] = _CLOCK[0]


def _limit_live(keep: Sandbox) -> None:
    """Stop the least recently used idle sandbox processes beyond :data:`MAX_LIVE`."""
    with _LOCK:
        live = [b for b in _SANDBOXES.values() if b is not keep and b.alive]
    live.sort(key=lambda b: _USE.get(id(b), 0))
    excess = len(live) + 1 - MAX_LIVE
    for b in live:
        if excess <= 0:
            break
        if b._idle or b._starting:
            b.close()
            excess -= 1


def get_sandbox(target: Any, engine: str = "auto", device: int | None = None) -> Sandbox:
    """The process-wide sandbox for ``target`` on ``engine``/``device`` (created on first use)."""
    ref, by_class, _ = target_ref(target)
    key = (ref if ref is not None else target, by_class, engine, device)
    with _LOCK:
        box = _SANDBOXES.get(key)
        if box is None:
            box = _SANDBOXES[key] = Sandbox(target, engine=engine, device=device)
        return box


def close_all() -> None:
    """Stop every sandbox process this process started (runs at exit)."""
    with _LOCK:
        boxes = list(_SANDBOXES.values())
        _SANDBOXES.clear()
    for box in boxes:
        try:
            box.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


atexit.register(close_all)

"""The fork server: sandbox children forked in milliseconds from one process that imported torch once.

A sandbox child started with ``spawn`` spends seconds importing torch, torch._dynamo (which
graphsafe's recorder pulls in on its first operation), hypothesis and graphsafe; paid once per
target, that was a large part of a short check.  Here the first sandbox of a process (a pytest
worker, the command line) starts ``multiprocessing``'s ``forkserver`` with :mod:`.preload` as its
preload, and every child after that forks from it.  Each process that starts sandboxes has its
own server, so the start-up is paid once per pytest worker, not once per target.  Targets name
further modules to import there (``preload``: vLLM's targets name vLLM, which takes seconds); the
first sandbox's, or those :func:`warm` is given, are what the server imports.

The server is started with the engine already decided: ``TRITON_INTERPRET`` is "1" (the emulator)
or "0" (CUDA) in its environment before it imports triton, ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` keeps
torch's device queries off the CUDA driver, and nothing there initialises CUDA, so a child can
create its own context.  Its ``sys.path`` is this process's.  A child takes this process's
environment as it is when the child starts, not the server's.

Under pytest the server is started earlier still, before the process imports torch
(:func:`start_early`, from the plugin's first hook): a pytest-xdist worker then imports torch and
graphsafe's checker while its server imports the same, instead of one after the other.  That start
guesses the engine without torch (a GPU device node present or not); when the targets are resolved,
:func:`warm` checks the guess and the import-time environment, and a server started on a wrong guess,
or without a preload a target needs, is stopped and started again.

``multiprocessing`` keeps one fork server per process.  It serves the engine and the import-time
environment (:func:`server_key`) of the first sandbox; a sandbox that needs others (the emulator
beside CUDA on a GPU machine, a changed ``CUDA_VISIBLE_DEVICES``) is spawned as before.  Every child
reports what it inherited (:data:`.preload.STATE`); if that is not what this process expects (a
server started elsewhere, another ``graphsafe`` on its path), the child is discarded, the process
stops using the server, and children are spawned.  ``GRAPHSAFE_FORKSERVER=0`` spawns every child.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import types
from collections.abc import Iterator
from multiprocessing import forkserver
from typing import Any

__all__ = [
    "context_for",
    "no_main_module",
    "warm",
    "start_early",
    "server_key",
    "mismatch",
    "stop_using",
    "METHODS",
    "PRELOAD",
    "PRELOAD_ENV",
]

#: the module the fork server imports for its children (:mod:`.preload`)
PRELOAD = __name__.rpartition(".")[0] + ".preload"
#: the environment variable that names the further modules the fork server imports (comma-separated)
PRELOAD_ENV = "GRAPHSAFE_PRELOAD"

#: how a sandbox's children start: ``auto`` (from the fork server where it serves) or ``spawn``
METHODS = ("auto", "spawn")

#: environment variables that torch, triton or their native libraries read when they are imported
_IMPORT_TIME = (
    "TORCH",
    "PYTORCH",
    "CUDA",
    "NVIDIA",
    "TRITON",
    "OMP_",
    "MKL_",
    "OPENBLAS",
    "KMP_",
    "GOMP",
    "LD_",
    "HYPOTHESIS",
)
#: set by :func:`_start` for the server itself (the interpreter is the key's first part)
_SET_HERE = ("TRITON_INTERPRET", "PYTORCH_NVML_BASED_CUDA_CHECK", PRELOAD_ENV)

_lock = threading.Lock()
#: the running server's key and preload, whether it was started on a guess, and why it is not used ('' if it is)
_state: dict[str, Any] = {"key": None, "preload": (), "guessed": False, "not_used": ""}


def _env_key() -> tuple:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_IMPORT_TIME) and k not in _SET_HERE))


def server_key(engine: str) -> tuple:
    """What a server must have been started with to serve a child on ``engine``: the interpreter
    or not, and the import-time environment variables as they are now."""
    from ..devices import interpreter_for  # torch: not before start_early's server runs

    return interpreter_for(engine), _env_key()


def _available() -> bool:
    return "forkserver" in mp.get_all_start_methods() and os.environ.get("GRAPHSAFE_FORKSERVER", "1") != "0"


def context_for(engine: str, method: str = "auto", preload: tuple[str, ...] = ()) -> tuple[Any, str]:
    """The ``multiprocessing`` context a child on ``engine`` starts from, and its name
    (``"forkserver"`` or ``"spawn"``); starts the server on the first call, importing ``preload`` (module
    names: a target's library, say) there too.  A server started without a child's ``preload`` still
    serves it: the child imports what is missing itself."""
    if method == "spawn" or not _available():
        return mp.get_context("spawn"), "spawn"
    key = server_key(engine)
    with _lock:
        if _state["guessed"] and not _state["not_used"]:
            _state["guessed"] = False  # from here on, the key is checked as for any server
            if _state["key"] != key or not set(preload) <= set(_state["preload"]):
                _restart(key, preload)
        if _state["key"] is None and not _state["not_used"]:
            _start(key, preload)
        usable = _state["key"] == key and not _state["not_used"]
    return (mp.get_context("forkserver"), "forkserver") if usable else (mp.get_context("spawn"), "spawn")


@contextlib.contextmanager
def no_main_module() -> Iterator[None]:
    """Hide ``__main__`` from multiprocessing while a child starts.

    ``spawn`` and ``forkserver`` re-run the parent's main script in the child unless it is guarded
    by ``if __name__ == "__main__"``; the child needs nothing from it (targets from ``__main__`` run
    in-process, see :func:`~graphsafe.frontend.sandbox.wire.target_ref`), so it is not sent at all.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def warm(engine: str, preload: tuple[str, ...] = ()) -> None:
    """Start the server now for ``engine`` (it imports in the background, ``preload`` too), unless one runs
    already."""
    if _available():
        context_for(engine, preload=preload)


def start_early(engine: str) -> None:
    """Start the server now, before this process imports torch, for ``engine`` as far as it can be told
    without torch: ``emulate``, ``TRITON_INTERPRET`` on, or ``auto`` with no NVIDIA device node
    (``/dev/nvidiactl``) mean the interpreter.  No preload (the targets are not resolved yet).  The first
    :func:`context_for` or :func:`warm` checks the guess and restarts the server when it was wrong."""
    if not _available():
        return
    interpret = (
        engine == "emulate"
        or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
        or (engine == "auto" and not os.path.exists("/dev/nvidiactl"))
    )
    with _lock:
        if _state["key"] is None and not _state["not_used"]:
            _start((interpret, _env_key()))
            _state["guessed"] = True


def _restart(key: tuple, preload: tuple[str, ...]) -> None:
    """Stop the running server (killed: it may still be importing) and start one for ``key``; when
    ``multiprocessing`` does not expose its server, children are spawned instead."""
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if server is None or pid is None or not hasattr(server, "_stop"):
        _state["not_used"] = "the fork server started for the wrong engine could not be stopped"
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    server._stop()
    _state["key"] = None
    _start(key, preload)


def _start(key: tuple, preload: tuple[str, ...] = ()) -> None:
    interpret = key[0]
    mp.get_context("forkserver").set_forkserver_preload([PRELOAD])
    server_env = {
        "TRITON_INTERPRET": "1" if interpret else "0",
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        PRELOAD_ENV: ",".join(dict.fromkeys(preload)),
    }
    saved = {k: os.environ.get(k) for k in server_env}
    os.environ.update(server_env)  # the server is started with this process's environment, read here
    try:
        forkserver.ensure_running()  # returns at once: the server imports while this process goes on
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    _state["key"], _state["preload"] = key, tuple(preload)


def mismatch(inherited: dict | None, engine: str) -> str:
    """Why a child forked from the server cannot be used for ``engine`` ('' when it can)."""
    if not inherited:
        return "the fork server running in this process did not preload graphsafe (it was started elsewhere)"
    if inherited.get("interpret") != server_key(engine)[0]:
        return "the fork server was started for the other engine (Triton interpreter on or off)"
    if inherited.get("cuda_initialized"):
        return "the fork server initialised CUDA, which its children cannot use"
    here = {name: getattr(sys.modules.get(name), "__file__", None) for name in inherited.get("files", {})}
    if inherited.get("files") != here:
        return f"the fork server imported other files than this process: {inherited.get('files')} against {here}"
    return ""


def stop_using(why: str) -> None:
    """Spawn every later child of this process (the fork server cannot serve it)."""
    with _lock:
        _state["not_used"] = why

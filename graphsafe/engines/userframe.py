"""Where in the target's own code something happened: the one rule for "user frame".

A frame is *infrastructure* when it belongs to graphsafe's machinery (every part of the
``graphsafe`` package except its own targets: the reference kernels and the FlashInfer targets), to the
libraries under it (torch and the sympy it imports, triton, FlashInfer, TVM-FFI, numpy, Hypothesis,
pytest, xdist) or to Python's standard library.  Everything else (a backend, a test, a script,
``graphsafe/reference``, ``graphsafe/flashinfer/targets.py``) is the target's own code, and findings
name its innermost frame: in a live stack (the recorder, per launch), in an exception's traceback (a
capture failure, a target error), or in a faulthandler dump (a crashed or hung sandbox).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig
import traceback
from collections.abc import Iterable
from types import FrameType

__all__ = ["is_infrastructure", "display_path", "user_frame", "user_frame_of", "innermost_user_frame"]

_GRAPHSAFE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: graphsafe's own targets: the reference kernels and the FlashInfer targets (not the FlashInfer stand-in)
_TARGET_CODE = (
    os.path.join(_GRAPHSAFE, "reference") + os.sep,
    os.path.join(_GRAPHSAFE, "flashinfer", "targets.py"),
    os.path.join(_GRAPHSAFE, "flashinfer", "variants.py"),
)
_STDLIB = tuple(
    os.path.abspath(p) for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")} if p
)
_SITE_DIRS = ("site-packages", "dist-packages")
_LIBRARIES = frozenset(
    {
        "torch",
        "triton",
        "numpy",
        "hypothesis",
        "_hypothesis_pytestplugin",
        "_pytest",
        "pytest",
        "pluggy",
        "xdist",
        "execnet",
        "typing_extensions",
        "flashinfer",
        "tvm_ffi",
        "sympy",
        "mpmath",
    }
)


@functools.lru_cache(maxsize=8192)
def is_infrastructure(filename: str) -> bool:
    """True for a file of graphsafe's machinery, a library under it, or the standard library.

    Cached per file name: the recorder asks for every recorded op.
    """
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return True
    path = os.path.abspath(filename)
    if path.startswith(_GRAPHSAFE + os.sep):
        return not path.startswith(_TARGET_CODE)
    parts = path.split(os.sep)
    sites = [i for i, part in enumerate(parts) if part in _SITE_DIRS]
    if sites:
        i = sites[-1]
        return i + 1 < len(parts) and parts[i + 1].split(".")[0] in _LIBRARIES
    return any(path.startswith(root + os.sep) for root in _STDLIB + _library_roots())


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    """Where torch, triton, FlashInfer and TVM-FFI live when they are not in site-packages (a source checkout,
    a folder on ``PYTHONPATH``)."""
    roots = []
    for name in ("torch", "triton", "flashinfer", "tvm_ffi"):
        try:
            spec = importlib.util.find_spec(name)  # finds a top-level package without importing it
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin:
            roots.append(os.path.dirname(os.path.abspath(spec.origin)))
    return tuple(roots)


def display_path(filename: str) -> str:
    """``filename`` relative to the current directory when it lies below it, else absolute."""
    return _display_path(filename, os.getcwd())


@functools.lru_cache(maxsize=8192)
def _display_path(filename: str, cwd: str) -> str:
    """:func:`display_path` for the current directory ``cwd``; cached: the recorder names a frame for every
    recorded op (thousands in a warm-up and capture), and the path arithmetic cost more than the rest."""
    path = os.path.normpath(os.path.join(cwd, filename))
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:  # another drive
        return path
    return path if rel.startswith("..") else rel


def _fmt(filename: str, line: int | str | None, func: str) -> str:
    return f"{display_path(filename)}:{line} in {func}"


def user_frame(skip: int = 0) -> str:
    """``file:line in func`` of the innermost live frame of the target's own code (``<unknown>``)."""
    f: FrameType | None = sys._getframe(skip + 1)
    while f is not None:
        if not is_infrastructure(f.f_code.co_filename):
            return _fmt(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return "<unknown>"


def innermost_user_frame(frames: Iterable[tuple[str, int | str | None, str]]) -> str:
    """The last ``(file, line, func)`` of the target's own code in outermost-first ``frames`` ('' if none)."""
    best = ""
    for filename, line, func in frames:
        if not is_infrastructure(filename):
            best = _fmt(filename, line, func)
    return best


def user_frame_of(exc: BaseException) -> str:
    """Where ``exc`` came from in the target's own code: its ``where`` when it carries one, else the
    innermost user frame of its traceback ('' if none)."""
    where = getattr(exc, "where", "")
    if where:
        return where
    return innermost_user_frame((fs.filename, fs.lineno, fs.name) for fs in traceback.extract_tb(exc.__traceback__))

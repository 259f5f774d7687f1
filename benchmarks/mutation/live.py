"""Mutants a sandbox process can import back by name, so that ``graphsafe.check`` isolates them.

A mutant is a class made at run time; a sandbox child loads its target as ``module:name``.  Here a mutant's name
is ``m_`` and the hex of its id (``subject|operator|buffer``), and this module's ``__getattr__`` makes the class
from that id in whichever process asks: the subject profiles and the library come from the environment the
benchmark's worker sets (``GRAPHSAFE_MUTANT_PROFILES``, ``GRAPHSAFE_MUTANT_LIBRARY``), which a sandbox child
inherits.  Isolated, a mutant whose replay never ends is stopped by the sandbox within seconds and its cause
decided in a fresh process, instead of holding the worker (and, on a GPU, every other job) until its timeout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from . import operators, subjects

__all__ = ["PROFILES_ENV", "LIBRARY_ENV", "mutant", "importable"]

PROFILES_ENV, LIBRARY_ENV = "GRAPHSAFE_MUTANT_PROFILES", "GRAPHSAFE_MUTANT_LIBRARY"


def mutant(mid: str, profiles: dict, library: str) -> tuple[type, operators.Operator | None, subjects.Buffer | None]:
    """The class of mutant ``mid`` (``subject|operator[|buffer path]``; ``subject|identity`` is the subject)."""
    subject, op_name, *rest = mid.split("|", 2)
    cls = subjects.subject_class(subject, library)
    if op_name == "identity":
        return cls, None, None
    op = operators.by_name(op_name)
    buf = None
    if rest:
        prof = subjects.Profile.from_dict(profiles[subject])
        buf = next(b for b in [*prof.written, *prof.unread] if b.path == rest[0])
    return op.make(cls, mid, buf), op, buf


def importable(cls: type, mid: str) -> type:
    """``cls`` (mutant ``mid``) named so that it imports back from this module; a subject (``identity``) is
    importable already and comes back as it is."""
    if mid.endswith("|identity"):
        return cls
    name = "m_" + mid.encode().hex()
    known = globals().get(name)
    if known is not None:
        return known
    cls.__module__, cls.__qualname__ = __name__, name
    globals()[name] = cls
    return cls


def __getattr__(name: str) -> Any:
    if not name.startswith("m_") or PROFILES_ENV not in os.environ:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    mid = bytes.fromhex(name[2:]).decode()
    profiles = json.loads(Path(os.environ[PROFILES_ENV]).read_text())
    cls, _, _ = mutant(mid, profiles, os.environ.get(LIBRARY_ENV, "standin"))
    return importable(cls, mid)

"""Options as front ends take them: parsing (one line per bad value), and graphsafe's Hypothesis profiles.

The command line and the pytest plugin read strings (``"1,2,4"``, ``"stale-pointer,lazy-init"``,
``"90"``); these functions turn them into values or raise a :class:`~graphsafe.errors.UsageError`
that names the option.  Nothing here imports a target; :func:`expand_targets` asks the registry
only for ``all``.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

from hypothesis import settings

from ..capture.policies import resolve_capture
from ..checker import names as registered_names
from ..engines import ENGINES
from ..errors import UsageError
from ..probes import PROBES

__all__ = [
    "PROFILES", "ISOLATION", "DEFAULT_TIMEOUT_S", "parse_engine", "parse_int", "parse_sizes", "parse_probes",
    "parse_isolate", "parse_timeout", "parse_capture", "expand_targets", "profile_name", "default_profile", "default_examples",
    "env_is_ci", "register_profiles", "hypothesis_profile", "one_line",
]

#: where checks run: ``none`` in the calling process, ``target`` in one sandbox process per target
ISOLATION = ("none", "target")

#: seconds one isolated check may take before its process is killed
DEFAULT_TIMEOUT_S = 600.0

#: short name -> (Hypothesis profile, default number of examples)
PROFILES: dict[str, tuple[str, int]] = {
    "fast": ("graphsafe-fast", 10),
    "ci": ("graphsafe-ci", 25),
    "thorough": ("graphsafe-thorough", 200),
}


# -- parsing -----------------------------------------------------------------------------
def one_line(msg: Any) -> str:
    """Collapse a (possibly multi-line) message into one line."""
    return re.sub(r"\s*\n\s*", " ", str(msg)).strip()


def parse_engine(value: Any, where: str = "engine") -> str:
    v = str(value).strip().lower()
    if v not in ENGINES:
        raise UsageError(f"{where}: unknown engine {value!r}; choose one of {', '.join(ENGINES)}")
    return v


def parse_int(value: Any, where: str, minimum: int = 1) -> int:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise UsageError(f"{where}: expected an integer, got {value!r}") from None
    if n < minimum:
        raise UsageError(f"{where}: must be >= {minimum}, got {n}")
    return n


def parse_isolate(value: Any, where: str = "isolate") -> str:
    v = str(value).strip().lower()
    if v not in ISOLATION:
        raise UsageError(f"{where}: unknown isolation {value!r}; choose one of {', '.join(ISOLATION)}")
    return v


def parse_timeout(value: Any, where: str = "timeout") -> float:
    """Seconds, > 0 (``"90"``, ``"2.5"``)."""
    try:
        t = float(str(value).strip())
    except (TypeError, ValueError):
        raise UsageError(f"{where}: expected a number of seconds, got {value!r}") from None
    if not t > 0 or t != t or t == float("inf"):
        raise UsageError(f"{where}: must be a number of seconds > 0, got {value!r}")
    return t


def _split(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    out: list[str] = []
    for v in value:
        out.extend(p.strip() for p in re.split(r"[,\s]+", str(v)) if p.strip())
    return out


def parse_sizes(value: Any, where: str = "capture sizes") -> tuple[int, ...] | None:
    """``"1,2,4"`` (or a list) -> ``(1, 2, 4)``, sorted and de-duplicated; empty -> ``None``."""
    parts = _split(value) if not isinstance(value, int) else [str(value)]
    if not parts:
        return None
    return tuple(sorted({parse_int(p, where) for p in parts}))


def parse_probes(value: Any, where: str = "probes") -> tuple[str, ...]:
    """Probe names from ``"p1,p2"`` or a list, in the given order; empty or ``all`` -> the defaults."""
    parts = _split(value)
    if not parts or parts == ["all"]:
        return tuple(PROBES)
    out: list[str] = []
    for p in parts:
        if p == "all":
            out.extend(n for n in PROBES if n not in out)
            continue
        if p not in PROBES:
            raise UsageError(f"{where}: unknown probe {p!r}; known probes: {', '.join(PROBES)}")
        if p not in out:
            out.append(p)
    return tuple(out)


def parse_capture(value: Any, where: str = "capture") -> tuple[str, ...] | None:
    """Capture policy names from ``"worst,minimal"`` or a list; empty -> None (explore)."""
    parts = _split(value)
    if not parts:
        return None
    try:
        resolve_capture(parts)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    return tuple(parts)


def expand_targets(values: Iterable[str]) -> list[str]:
    """Target names in the given order, de-duplicated; ``all`` expands to every registered name (sorted)."""
    out: list[str] = []
    for v in _split(list(values)):
        if v == "all":
            new = registered_names()
        else:
            new = [v]
        out.extend(n for n in new if n not in out)
    return out


# -- Hypothesis profiles -------------------------------------------------------------------
def env_is_ci() -> bool:
    """True when the ``CI`` environment variable is set to a true value."""
    v = os.environ.get("CI")
    return v is not None and v.strip().lower() not in ("", "0", "false", "no", "off")


def default_profile() -> str:
    return "ci" if env_is_ci() else "fast"


def profile_name(value: Any = None) -> str:
    """The Hypothesis profile for ``fast``/``ci``/``thorough`` (or ``graphsafe-...``); ``None``: by ``CI``."""
    if value is None or str(value).strip() == "":
        value = default_profile()
    v = str(value).strip().lower()
    if v.startswith("graphsafe-"):
        v = v[len("graphsafe-"):]
    if v not in PROFILES:
        raise UsageError(f"profile: unknown profile {value!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[v][0]


def default_examples(profile: str) -> int:
    """Examples per check when none were asked for: the profile's (fast 10, ci 25, thorough 200)."""
    for full, n in PROFILES.values():
        if full == profile:
            return n
    return PROFILES["fast"][1]


def register_profiles() -> None:
    """Register ``graphsafe-fast``, ``graphsafe-ci`` and ``graphsafe-thorough`` (idempotent).

    They derive from Hypothesis' built-in ``default`` profile, not from
    whatever is loaded, so the same name means the same settings everywhere.
    """
    base = settings.get_profile("default")
    settings.register_profile("graphsafe-fast", parent=base, max_examples=10, deadline=None)
    settings.register_profile(
        "graphsafe-ci", parent=base, max_examples=25, deadline=None, derandomize=True, database=None, print_blob=False
    )
    settings.register_profile("graphsafe-thorough", parent=base, max_examples=200, deadline=None)


@contextmanager
def hypothesis_profile(name: str) -> Iterator[None]:
    """Load a Hypothesis profile for the duration of one check, then put the previous one back.

    ``graphsafe.check`` derives its settings from ``settings.default``, so
    this is what makes the profile apply to graphsafe's checks only (and win
    over the ``ci`` profile Hypothesis loads by itself when ``CI`` is set).
    """
    register_profiles()
    prev = settings.get_current_profile_name()
    settings.load_profile(name)
    try:
        yield
    finally:
        try:
            settings.load_profile(prev)
        except Exception:  # pragma: no cover - the previous profile vanished
            settings.load_profile("default")

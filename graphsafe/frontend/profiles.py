"""graphsafe's Hypothesis profiles: ``graphsafe-fast``, ``graphsafe-ci`` and ``graphsafe-thorough``.

A profile applies to graphsafe's checks only: :func:`hypothesis_profile` loads it for one check
and puts the previous one back.  Their example counts are :data:`graphsafe.defaults.PROFILES`.

Example::

    with hypothesis_profile(profile_name("ci")):
        ...   # settings.default is graphsafe-ci here: 25 examples, derandomised, no database
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import settings

from .. import defaults
from ..errors import UsageError

__all__ = [
    "PROFILES",
    "env_is_ci",
    "default_profile",
    "profile_name",
    "default_examples",
    "register_profiles",
    "hypothesis_profile",
]

#: short name -> (Hypothesis profile, default number of examples)
PROFILES = defaults.PROFILES


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
        v = v[len("graphsafe-") :]
    if v not in PROFILES:
        raise UsageError(f"profile: unknown profile {value!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[v][0]


def default_examples(profile: str) -> int:
    """Examples per check when none were asked for: the profile's (fast 10, ci 25, thorough 200)."""
    for full, n in PROFILES.values():
        if full == profile:
            return n
    raise UsageError(f"profile: unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")


def register_profiles() -> None:
    """Register ``graphsafe-fast``, ``graphsafe-ci`` and ``graphsafe-thorough`` (idempotent).

    They derive from Hypothesis' built-in ``default`` profile, not from
    whatever is loaded, so the same name means the same settings everywhere.
    """
    base = settings.get_profile("default")
    (fast, n_fast), (ci, n_ci), (thorough, n_thorough) = (PROFILES[p] for p in ("fast", "ci", "thorough"))
    settings.register_profile(fast, parent=base, max_examples=n_fast, deadline=None)
    settings.register_profile(
        ci, parent=base, max_examples=n_ci, deadline=None, derandomize=True, database=None, print_blob=False
    )
    settings.register_profile(thorough, parent=base, max_examples=n_thorough, deadline=None)


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

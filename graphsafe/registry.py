"""Target names: the reference kernels, the ``graphsafe.targets`` entry points, and ``module:Class``."""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points

__all__ = ["names", "lookup"]


def _entry_points() -> dict:
    return {ep.name: ep for ep in entry_points(group="graphsafe.targets")}


def names() -> list[str]:
    """Every registered target name, sorted."""
    out = set(_entry_points())
    try:
        from . import reference

        out |= set(reference.names())
    except Exception:  # pragma: no cover - a broken reference package must not hide entry points
        pass
    return sorted(out)


def lookup(name: str) -> type:
    """The class for a registered name or ``module:Class``; a one-line TargetError otherwise."""
    from .checker import TargetError

    eps = _entry_points()
    try:
        from . import reference

        if name in reference.names():
            return reference.resolve(name)
    except ImportError:
        pass
    if name in eps:
        try:
            return eps[name].load()
        except Exception as e:
            raise TargetError(f"target {name!r}: its entry point {eps[name].value} does not import: {type(e).__name__}: {e}") from None
    if ":" in name:
        mod_name, _, attr = name.partition(":")
        try:
            mod = importlib.import_module(mod_name)
        except Exception as e:
            raise TargetError(f"target {name!r}: module {mod_name!r} does not import: {type(e).__name__}: {e}") from None
        obj = mod
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise TargetError(f"target {name!r}: module {mod_name!r} has no attribute {attr!r}") from None
        if not inspect.isclass(obj):
            raise TargetError(f"target {name!r} is a {type(obj).__name__}, not a Target class")
        return obj
    known = ", ".join(names()) or "(none registered)"
    raise TargetError(f"unknown target {name!r}: give 'module:Class' or one of: {known}")

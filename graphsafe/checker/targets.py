"""Which class a target name means, and whether the class meets the contract.

A target is a class, ``"module:Class"`` or a registered name: the names of the target families
(:mod:`graphsafe.checker.families`: the reference kernels, which ``all`` stands for, and the FlashInfer, vLLM
and SGLang targets, which need their library and a GPU to run and are each a group of their own), names a
family makes by reference (``vllm:<backend>``), and the ``graphsafe.targets`` entry points of installed
packages.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from importlib.metadata import entry_points
from typing import Any

from ..contract import CaptureSpec, Support, Target
from ..errors import ContractError, UsageError
from .families import families, family_of

__all__ = [
    "names",
    "lookup",
    "resolve_target",
    "validate_target",
    "target_name",
    "expand",
    "groups",
    "declared_support",
]


def _entry_points() -> dict:
    return {ep.name: ep for ep in entry_points(group="graphsafe.targets")}


def groups() -> list[str]:
    """Words that stand for several targets: ``all`` (the families it includes and installed packages' entry
    points), then each other family's prefix (``flashinfer``, ``vllm``, ``sglang``: they need their library)."""
    return ["all"] + [f.prefix for f in families(in_all=False)]


def names() -> list[str]:
    """Every name ``all`` stands for (the reference kernels and entry points; another family's targets are
    its group, :func:`expand`), sorted."""
    own = [n for f in families(in_all=True) for n in f.names()]
    return sorted(set(_entry_points()) | set(own))


def expand(word: str) -> list[str]:
    """The target names a word stands for: a group (:func:`groups`) or itself."""
    if word == "all":
        return names()
    for fam in families(in_all=False):
        if word == fam.prefix:
            return fam.names()
    return [word]


def _unknown(name: str, why: str) -> UsageError:
    every = names() + [n for f in families(in_all=False) for n in f.names()]
    close = difflib.get_close_matches(name, every, n=3, cutoff=0.75)
    if close:
        return UsageError(f"no registered target {name!r}; did you mean {' or '.join(close)}?")
    return UsageError(why)


def lookup(name: str) -> type:
    """The class for a registered name or ``module:Class``; a one-line :class:`UsageError` otherwise."""
    fam = family_of(name)
    if fam is not None:  # the classes import without their library; their setup() needs it
        return fam.resolve(name)
    eps = _entry_points()
    if name in eps:
        try:
            return eps[name].load()
        except Exception as e:
            raise UsageError(
                f"target {name!r}: its entry point {eps[name].value} does not import: {type(e).__name__}: {e}"
            ) from None
    if ":" not in name:
        known = ", ".join(names()) or "(none registered)"
        raise _unknown(name, f"unknown target {name!r}: give 'module:Class' or one of: {known}")
    mod_name, _, attr = name.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise _unknown(name, f"target {name!r}: module {mod_name!r} does not import: {type(e).__name__}: {e}") from None
    except Exception as e:
        raise UsageError(f"target {name!r}: module {mod_name!r} does not import: {type(e).__name__}: {e}") from None
    obj: Any = mod
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise _unknown(name, f"target {name!r}: module {mod_name!r} has no attribute {attr!r}")
    if not inspect.isclass(obj):
        raise UsageError(f"target {name!r} is a {type(obj).__name__}, not a Target class")
    return obj


def target_name(cls: type) -> str:
    """How results and reports name a class: its ``name`` attribute, else ``module:qualname``."""
    return getattr(cls, "name", None) or f"{cls.__module__}:{cls.__qualname__}"


def resolve_target(target: Any) -> tuple[type, str]:
    """``(class, name)`` for a class, ``"module:Class"`` or a registered name."""
    if inspect.isclass(target):
        return target, target_name(target)
    if not isinstance(target, str):
        raise UsageError(
            f"target must be a Target class, 'module:Class' or a registered name, got {type(target).__name__}"
        )
    return lookup(target), target


def declared_support(cls: type) -> Any:
    """``cls.support`` without resolving a level that the class resolves where its check runs: such a
    ``support`` (graphsafe.vllm's, read from vLLM's builder class) is a descriptor with a true
    ``resolved_when_checked`` attribute, returned as it is, so that a process that only schedules checks
    does not import the backend's library."""
    raw = inspect.getattr_static(cls, "support", None)
    if getattr(raw, "resolved_when_checked", False):
        return raw
    return getattr(cls, "support", Target.support)


def validate_target(cls: type) -> None:
    """Raise :class:`ContractError` naming the method or attribute that breaks the contract (a support
    level resolved where the check runs is checked there, by the check itself)."""
    name = getattr(cls, "__qualname__", repr(cls))
    for meth in ("setup", "prepare", "forward"):
        fn = getattr(cls, meth, None)
        if fn is None or not callable(fn):
            raise ContractError(
                f"{name} has no {meth}() method: a Target needs setup(spec, device), prepare(batch) and forward()"
            )
        if issubclass(cls, Target) and getattr(Target, meth) is fn:
            raise ContractError(f"{name}.{meth}() is not implemented: override it (see graphsafe.Target's docstring)")
    support = declared_support(cls)
    if getattr(support, "resolved_when_checked", False):
        support = Support.ALWAYS  # (stands for "not NEVER": the level itself is known where the check runs)
    if not isinstance(support, Support):
        try:
            support = Support(support)
        except Exception:
            raise ContractError(f"{name}.support must be a graphsafe.Support, got {support!r}") from None
    if support == Support.NEVER:
        raise ContractError(
            f"{name}.support is Support.NEVER: such a backend must not be captured, so there is nothing to check"
        )
    spec = getattr(cls, "default_spec", None)
    if spec is not None and not isinstance(spec, CaptureSpec):
        raise ContractError(f"{name}.default_spec must be a graphsafe.CaptureSpec or None, got {type(spec).__name__}")

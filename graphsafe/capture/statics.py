"""A target's static tensors: what ``static()`` declares, checked, named and re-randomised.

Static tensors (weights, KV caches, recurrent state) persist by design: graphsafe does not
NaN-poison them, gives both instances the same values at the start of every example, and
compares them after every step.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from ..contract import Target
from ..errors import ContractError
from ..values import derive_seed, seeded
from .statewalk import storage_key, walk

__all__ = ["static_dict", "static_keys", "randomise_static"]


def static_dict(target: Target) -> dict[str, torch.Tensor]:
    """``target.static()`` as a name -> tensor dict (lists get ``static[i]`` names; no ``static()``: none)."""
    static = getattr(target, "static", None)
    s = static() if static is not None else None
    if s is None:
        return {}
    if isinstance(s, dict):
        items = dict(s)
    elif isinstance(s, (list, tuple)):
        items = {f"static[{i}]": t for i, t in enumerate(s)}
    else:
        raise ContractError(
            f"{type(target).__name__}.static() must return a dict of name -> tensor or a list of tensors, "
            f"got {type(s).__name__}"
        )
    for k, t in items.items():
        if not isinstance(t, torch.Tensor):
            raise ContractError(
                f"{type(target).__name__}.static()[{k!r}] is a {type(t).__name__}, not a tensor; "
                "return only tensors the target holds (weights, caches, state)"
            )
    _require_held(target, items, isinstance(s, dict))
    return items


# target -> storage keys of its static() tensors already found on it (walked again only when they change)
_HELD: "weakref.WeakKeyDictionary[Any, frozenset[int]]" = weakref.WeakKeyDictionary()


def _require_held(target: Target, items: dict[str, torch.Tensor], named: bool) -> None:
    """A contract TypeError when a static() tensor's storage is not reachable from the target's attributes.

    graphsafe restores, randomises and compares static tensors through their
    storage; a tensor built fresh by static() (or held elsewhere) is a
    different buffer on every call, so those steps would touch nothing the
    graph reads, and its freed address could hide another buffer.
    """
    keys = {k: storage_key(t) for k, t in items.items() if t.untyped_storage().nbytes() > 0}
    if not keys:
        return
    try:
        if set(keys.values()) <= _HELD.get(target, frozenset()):
            return
    except TypeError:  # not weak-referenceable: check every time
        pass
    held = {storage_key(t) for _, t in walk(target)}
    for k, key in keys.items():
        if key not in held:
            label = f"static()[{k!r}]" if named else f"static()[{k.removeprefix('static[').removesuffix(']')}]"
            raise ContractError(
                f"{type(target).__name__}.{label} is not held by the target; return tensors stored on the "
                "target (assign them to attributes in setup())"
            )
    try:
        _HELD[target] = frozenset(keys.values())
    except TypeError:
        pass


def randomise_static(target: Target, seed: int) -> None:
    """Re-fill floating static tensors with values fixed by ``seed`` (same on every device)."""
    for name, t in static_dict(target).items():
        if t.dtype.is_floating_point:
            with torch.no_grad():
                t.copy_(seeded(tuple(t.shape), seed=derive_seed(seed, name), dtype=t.dtype, device=t.device))


def static_keys(target: Target) -> set[int]:
    """Storage keys of ``target``'s static tensors."""
    return {storage_key(t) for t in static_dict(target).values()}

"""A target's static tensors: what ``static()`` declares, checked, named, re-randomised and saved.

Static tensors (weights, KV caches, recurrent state) persist by design: graphsafe does not
NaN-poison them, gives both instances the same values at the start of every example, and
compares them after every step.  They can be GBs: nothing here copies one whole.  Values are
generated on the tensor's device piece by piece (:func:`graphsafe.values.fill_seeded`), and
:class:`SavedStatics` keeps only what a replay can change.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..contract import Target
from ..errors import ContractError
from ..values import SEEDED_POOL, derive_seed, fill_seeded, seeded_pieces
from .compare import piece_elems
from .statewalk import storage_key, walk

__all__ = ["static_dict", "static_keys", "randomise_static", "SavedStatics"]


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
_HELD: weakref.WeakKeyDictionary[Any, frozenset[int]] = weakref.WeakKeyDictionary()


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
    # most targets hold their static tensors as attributes of their own: look there before walking
    direct = {storage_key(v) for v in getattr(target, "__dict__", {}).values() if isinstance(v, torch.Tensor)}
    if set(keys.values()) <= direct:
        held = direct
    else:
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


def randomise_static(target: Target, seed: int, like: Target | None = None) -> None:
    """Re-fill floating static tensors with values fixed by ``seed`` and the name (same on every
    device), in place on their device.  ``like``, an instance randomised with ``seed`` just before
    (and untouched since), gives its values by copy instead: no generation, no temporaries."""
    done = static_dict(like) if like is not None else {}
    for name, t in static_dict(target).items():
        if t.dtype.is_floating_point:
            src = done.get(name)
            with torch.no_grad():
                if src is not None and (src.dtype, src.shape) == (t.dtype, t.shape):
                    t.copy_(src)
                else:
                    fill_seeded(t, derive_seed(seed, name))


#: decide which pieces changed with one read on the CPU too (off: there ``torch.equal`` per piece is cheaper;
#: tests turn it on to check the GPU's form)
ONE_READ_ON_CPU = False


class SavedStatics:
    """The static tensors of an instance at the first step of an example, saved so that replays can be
    undone (:meth:`restore`) without a full copy of a large one.

    A paged cache compared by region (``paged(t)``) keeps the rows of ``region``, the only blocks a
    step can touch.  Another large contiguous floating tensor keeps only its pieces that differ from
    the values ``seed`` gives it (what ``prepare()`` wrote since the example's reset); the rest is
    regenerated on restore.  Anything else (small, or large and neither floating nor contiguous)
    is cloned.
    """

    def __init__(
        self,
        statics: dict[str, torch.Tensor],
        seed: int,
        region: torch.Tensor | None,
        paged: Callable[[torch.Tensor], bool],
    ):
        self.parts: list[tuple] = []
        for name, t in statics.items():
            if region is not None and paged(t):
                rows = region.to(t.device)
                self.parts.append(("rows", t, rows, t.index_select(0, rows)))
            elif t.dtype.is_floating_point and t.is_contiguous() and t.numel() > SEEDED_POOL:
                key, flat = derive_seed(seed, name), t.view(-1)
                self.parts.append(("seeded", t, key, self._changed(t, flat, key)))
            else:
                self.parts.append(("clone", t, t.clone()))

    @classmethod
    def _changed(cls, t: torch.Tensor, flat: torch.Tensor, key: int) -> dict[int, torch.Tensor]:
        """Copies of the pieces of ``t`` that differ from the values ``key`` gives it, by flat offset.  On
        the CPU a piece that is equal costs one ``torch.equal``; elsewhere every piece's verdict stays on
        the device until one read for all (no synchronisation per piece)."""
        if t.device.type == "cpu" and not ONE_READ_ON_CPU:
            return {
                s: flat[s : s + v.numel()].clone()
                for s, v in cls._expected(t, key)
                if not torch.equal(_bits(flat[s : s + v.numel()]), _bits(v))
            }
        spans, flags = [], []
        for s, v in cls._expected(t, key):
            spans.append((s, v.numel()))
            flags.append((_bits(flat[s : s + v.numel()]) != _bits(v)).any())
        differs = torch.stack(flags).tolist() if flags else []
        return {s: flat[s : s + n].clone() for (s, n), d in zip(spans, differs) if d}

    @staticmethod
    def _expected(t: torch.Tensor, key: int) -> Iterator[tuple[int, torch.Tensor]]:
        """``t``'s values after :func:`fill_seeded` with ``key``, in flat pieces of its dtype."""
        for s, v in seeded_pieces(t.numel(), key, t.device, chunk=piece_elems(t)):
            yield s, v.to(t.dtype)

    def restore(self) -> None:
        """Put the saved contents back."""
        for kind, t, *rest in self.parts:
            if kind == "rows":
                t.index_copy_(0, *rest)
            elif kind == "clone":
                t.copy_(rest[0])
            else:
                key, changed = rest
                flat = t.view(-1)
                for s, v in self._expected(t, key):
                    flat[s : s + v.numel()].copy_(changed.get(s, v))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bytes (NaN and -0.0 compare by their bits)."""
    return t.view(torch.uint8)


def static_keys(target: Target) -> set[int]:
    """Storage keys of ``target``'s static tensors."""
    return {storage_key(t) for t in static_dict(target).values()}

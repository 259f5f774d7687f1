"""Walk a target's object graph and name every tensor it holds by attribute path.

``self.meta.kv_indices``, ``self.bufs['x']``, ``self.states[0].sched``: the
paths findings use to name the buffer at fault.  Identity of a buffer is its
storage (``storage_key``): views of one persistent buffer share it.
:func:`walk_steps` also gives the steps that reach each tensor (an attribute or
an item), so that a path can be read again later without parsing its text.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Iterator

import torch

__all__ = ["storage_key", "walk", "walk_steps", "Step", "paths_by_storage", "byte_view", "typed_view"]

_MAX_DEPTH = 8
_MAX_VISITS = 100_000  # objects walked with every_path=True (shared objects are walked once per path)
_SKIP_MODULE_PREFIXES = ("triton", "torch._", "numpy", "hypothesis", "graphsafe.engines", "graphsafe._internal")

#: one step from an object to a child: ``(False, name)`` reads ``getattr(obj, name)``, ``(True, key)`` reads ``obj[key]``
Step = tuple[bool, Any]


def storage_key(t: torch.Tensor) -> int:
    """The identity of the memory a tensor reads: its storage's address."""
    return t.untyped_storage().data_ptr()


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """The whole storage behind ``t`` as a flat uint8 tensor (aliasing it)."""
    s = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(s, 0, (s.nbytes(),), (1,))


def typed_view(t: torch.Tensor) -> torch.Tensor:
    """The whole storage behind ``t`` as a flat tensor of ``t``'s dtype (aliasing it)."""
    s = t.untyped_storage()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(s, 0, (s.nbytes() // t.element_size(),), (1,))


def _children(obj: Any) -> Iterator[tuple[str, Step, Any]]:
    """``(label, step, child)`` for each child of ``obj``."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"[{k!r}]", (True, k), v
    elif isinstance(obj, (list, tuple)):
        fields = getattr(type(obj), "_fields", None)  # namedtuple
        for i, v in enumerate(obj):
            yield (f".{fields[i]}", (False, fields[i]), v) if fields else (f"[{i}]", (True, i), v)
    elif isinstance(obj, torch.nn.Module):
        for n, p in obj.named_parameters(recurse=False):
            yield f".{n}", (False, n), p
        for n, b in obj.named_buffers(recurse=False):
            yield f".{n}", (False, n), b
        for n, m in obj.named_children():
            yield f".{n}", (False, n), m
        for n, v in vars(obj).items():
            if not n.startswith("_"):
                yield f".{n}", (False, n), v
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = [f.name for f in dataclasses.fields(obj)]  # listed once, not once per attribute
        for n in names:
            yield f".{n}", (False, n), getattr(obj, n, None)
        known = set(names)
        for n, v in getattr(obj, "__dict__", {}).items():
            if n not in known:
                yield f".{n}", (False, n), v
    else:
        d = getattr(obj, "__dict__", None)
        if d is not None:
            for n, v in d.items():
                yield f".{n}", (False, n), v
        for n in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, n):
                yield f".{n}", (False, n), getattr(obj, n)


def _walkable(obj: Any) -> bool:
    if obj is None or isinstance(obj, (str, bytes, int, float, bool, complex, torch.dtype, torch.device)):
        return False
    if isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return False
    mod = type(obj).__module__ or ""
    return not mod.startswith(_SKIP_MODULE_PREFIXES)


def walk_steps(root: Any, prefix: str = "self", *, every_path: bool = False, steps: bool = True
               ) -> Iterator[tuple[str, tuple[Step, ...], torch.Tensor]]:
    """Yield ``(path, steps, tensor)`` for every tensor reachable from ``root``; ``steps`` lead from
    ``root`` to the tensor (see :data:`Step`).

    An object reached twice is walked once, under its first path, unless ``every_path``: then it
    is walked under each path that does not pass through it already (a cycle), up to
    ``_MAX_VISITS`` objects in all, so that a tensor held at ``self.meta.x`` and at
    ``self.by_size[4].x`` (one object, two paths) yields both.  ``steps=False`` leaves the steps
    empty (cheaper, for callers that need only the paths).
    """
    seen: set[int] = set()
    visits = 0
    stack: list[tuple[str, tuple[Step, ...], Any, int, tuple[int, ...]]] = [(prefix, (), root, 0, ())]
    while stack:
        path, trail, obj, depth, above = stack.pop()
        if isinstance(obj, torch.Tensor):
            yield path, trail, obj
            continue
        if depth > _MAX_DEPTH or not _walkable(obj) or id(obj) in (above if every_path else seen):
            continue
        visits += 1
        if every_path and visits > _MAX_VISITS:
            return
        seen.add(id(obj))
        inner = above + (id(obj),) if every_path else above
        kids = list(_children(obj))
        for name, step, child in reversed(kids):
            stack.append((path + name, trail + (step,) if steps else trail, child, depth + 1, inner))


def walk(root: Any, prefix: str = "self") -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(path, tensor)`` for every tensor reachable from ``root``."""
    for path, _, t in walk_steps(root, prefix, steps=False):
        yield path, t


def paths_by_storage(root: Any, prefix: str = "self") -> dict[int, list[str]]:
    """Map storage key -> attribute paths of the tensors that use it."""
    out: dict[int, list[str]] = {}
    for path, t in walk(root, prefix):
        if t.numel() == 0 and t.untyped_storage().nbytes() == 0:
            continue
        out.setdefault(storage_key(t), []).append(path)
    return out

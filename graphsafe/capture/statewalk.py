"""Walk a target's object graph and name every tensor it holds by attribute path.

``self.meta.kv_indices``, ``self.bufs['x']``, ``self.states[0].sched``: the
paths findings use to name the buffer at fault.  Identity of a buffer is its
storage (``storage_key``): views of one persistent buffer share it.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Iterator

import torch

__all__ = ["storage_key", "walk", "paths_by_storage", "byte_view", "typed_view"]

_MAX_DEPTH = 8
_SKIP_MODULE_PREFIXES = ("triton", "torch._", "numpy", "hypothesis", "graphsafe.engines", "graphsafe._internal")


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


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"[{k!r}]", v
    elif isinstance(obj, (list, tuple)):
        fields = getattr(type(obj), "_fields", None)  # namedtuple
        for i, v in enumerate(obj):
            yield (f".{fields[i]}" if fields else f"[{i}]"), v
    elif isinstance(obj, torch.nn.Module):
        for n, p in obj.named_parameters(recurse=False):
            yield f".{n}", p
        for n, b in obj.named_buffers(recurse=False):
            yield f".{n}", b
        for n, m in obj.named_children():
            yield f".{n}", m
        for n, v in vars(obj).items():
            if not n.startswith("_"):
                yield f".{n}", v
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield f".{f.name}", getattr(obj, f.name, None)
        for n, v in getattr(obj, "__dict__", {}).items():
            if n not in {f.name for f in dataclasses.fields(obj)}:
                yield f".{n}", v
    else:
        d = getattr(obj, "__dict__", None)
        if d is not None:
            for n, v in d.items():
                yield f".{n}", v
        for n in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, n):
                yield f".{n}", getattr(obj, n)


def _walkable(obj: Any) -> bool:
    if obj is None or isinstance(obj, (str, bytes, int, float, bool, complex, torch.dtype, torch.device)):
        return False
    if isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return False
    mod = type(obj).__module__ or ""
    return not mod.startswith(_SKIP_MODULE_PREFIXES)


def walk(root: Any, prefix: str = "self") -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(path, tensor)`` for every tensor reachable from ``root``."""
    seen: set[int] = set()
    stack: list[tuple[str, Any, int]] = [(prefix, root, 0)]
    while stack:
        path, obj, depth = stack.pop()
        if isinstance(obj, torch.Tensor):
            yield path, obj
            continue
        if depth > _MAX_DEPTH or id(obj) in seen or not _walkable(obj):
            continue
        seen.add(id(obj))
        kids = list(_children(obj))
        for name, child in reversed(kids):
            stack.append((path + name, child, depth + 1))


def paths_by_storage(root: Any, prefix: str = "self") -> dict[int, list[str]]:
    """Map storage key -> attribute paths of the tensors that use it."""
    out: dict[int, list[str]] = {}
    for path, t in walk(root, prefix):
        if t.numel() == 0 and t.untyped_storage().nbytes() == 0:
            continue
        out.setdefault(storage_key(t), []).append(path)
    return out

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
from collections.abc import Iterator
from typing import Any

import torch

__all__ = [
    "storage_key",
    "walk",
    "walk_steps",
    "tensors",
    "Step",
    "paths_by_storage",
    "byte_view",
    "same_bits",
    "alike_bytes",
    "typed_view",
]

_MAX_DEPTH = 8
_MAX_VISITS = 100_000  # objects walked with every_path=True (shared objects are walked once per path)
# configuration objects hold no device buffers: vLLM's configs and the Hugging Face configs inside them are
# thousands of objects a walk would visit every step
_SKIP_MODULE_PREFIXES = (
    "triton",
    "torch._",
    "numpy",
    "hypothesis",
    "graphsafe.engines",
    "graphsafe._internal",
    "vllm.config",
    "transformers",
)

#: one step from an object to a child: ``(False, name)`` reads ``getattr(obj, name)``, ``(True, key)`` reads ``obj[key]``
Step = tuple[bool, Any]


def storage_key(t: torch.Tensor) -> int:
    """The identity of the memory a tensor reads: its storage's address."""
    return t.untyped_storage().data_ptr()


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """The whole storage behind ``t`` as a flat uint8 tensor (aliasing it)."""
    s = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(s, 0, (s.nbytes(),), (1,))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do ``a`` and ``b`` (views of any layout) hold the same bytes, element for element?  Unlike ``torch.equal``,
    a NaN equals the same NaN (a buffer poisoned alike in two instances) and ``-0.0`` differs from ``0.0``."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


_WORD = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # an integer dtype of each element size


def alike_bytes(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> bool:
    """Do the byte runs ``a`` and ``b`` (flat uint8, one length) hold the same elements of ``dtype``, where a NaN
    matches any NaN?  Every NaN stands for "nobody wrote this": the poison's, or a value computed from it (a GPU's
    arithmetic gives the canonical NaN, a CPU keeps the poison's payload).  Other elements compare bit for bit; a
    run not whole elements of a floating ``dtype`` compares byte for byte."""
    if torch.equal(a, b):
        return True
    size = torch.empty(0, dtype=dtype).element_size()
    if not dtype.is_floating_point or a.numel() != b.numel() or a.numel() % size or size not in _WORD:
        return False
    x, y = a.view(dtype), b.view(dtype)
    return bool(((a.view(_WORD[size]) == b.view(_WORD[size])) | (x.isnan() & y.isnan())).all())


def typed_view(t: torch.Tensor) -> torch.Tensor:
    """The whole storage behind ``t`` as a flat tensor of ``t``'s dtype (aliasing it)."""
    s = t.untyped_storage()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(s, 0, (s.nbytes() // t.element_size(),), (1,))


# What a walk does with an object of each type, decided once per type: (_LEAF) nothing, (_DICT) its
# values, (_SEQ) its items, (_MODULE) an nn.Module's parameters, buffers, children and public attributes,
# (_DATACLASS) its fields then its other attributes, (_PLAIN) its ``__dict__`` then its ``__slots__``.
_LEAF, _DICT, _SEQ, _MODULE, _DATACLASS, _PLAIN = range(6)
_LEAF_TYPES = (
    str,
    bytes,
    int,
    float,
    bool,
    complex,
    torch.dtype,
    torch.device,
    type,
    types.ModuleType,
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    type(None),
)
_KINDS: dict[type, int] = {}
_FIELDS: dict[type, tuple[tuple[str, ...], frozenset[str]]] = {}  # a dataclass's field names, listed once
_MAX_KINDS = 4096  # types remembered at most (classes made on the fly, in tests say, are not kept alive forever)


def _kind(tp: type) -> int:
    kind = _KINDS.get(tp)
    if kind is None:
        if len(_KINDS) >= _MAX_KINDS:
            _KINDS.clear()
            _FIELDS.clear()
        if issubclass(tp, _LEAF_TYPES) or (tp.__module__ or "").startswith(_SKIP_MODULE_PREFIXES):
            kind = _LEAF
        elif issubclass(tp, dict):
            kind = _DICT
        elif issubclass(tp, (list, tuple)):
            kind = _SEQ
        elif issubclass(tp, torch.nn.Module):
            kind = _MODULE
        elif dataclasses.is_dataclass(tp):
            kind = _DATACLASS
            names = tuple(f.name for f in dataclasses.fields(tp))
            _FIELDS[tp] = names, frozenset(names)
        else:
            kind = _PLAIN
        _KINDS[tp] = kind
    return kind


def _items(obj: Any, kind: int) -> list[tuple[Step, Any]]:
    """``(step, child)`` for each child of ``obj`` (a walkable object of ``kind``), in walking order."""
    if kind == _DICT:
        return [((True, k), v) for k, v in obj.items()]
    if kind == _SEQ:
        fields = getattr(type(obj), "_fields", None)  # namedtuple
        return [((False, fields[i]), v) if fields else ((True, i), v) for i, v in enumerate(obj)]
    if kind == _MODULE:
        return [
            *(((False, n), p) for n, p in obj.named_parameters(recurse=False)),
            *(((False, n), b) for n, b in obj.named_buffers(recurse=False)),
            *(((False, n), m) for n, m in obj.named_children()),
            *(((False, n), v) for n, v in vars(obj).items() if not n.startswith("_")),
        ]
    d = getattr(obj, "__dict__", None)
    if kind == _DATACLASS:
        names, known = _FIELDS[type(obj)]
        out = [((False, n), getattr(obj, n, None)) for n in names]
        if d:
            out += [((False, n), v) for n, v in d.items() if n not in known]
        return out
    out = [] if d is None else [((False, n), v) for n, v in d.items()]
    for n in getattr(type(obj), "__slots__", ()):
        if hasattr(obj, n):
            out.append(((False, n), getattr(obj, n)))
    return out


def _label(step: Step) -> str:
    """A step as a path's text: ``[key]`` for an item, ``.name`` for an attribute."""
    item, key = step
    return f"[{key!r}]" if item else f".{key}"


def tensors(root: Any) -> list[torch.Tensor]:
    """Every tensor reachable from ``root``, in :func:`walk`'s order, without paths: what the per-step
    walks (poison, reset) need, at about half a walk's cost (no paths, no generator)."""
    seen: set[int] = set()
    out: list[torch.Tensor] = []
    stack: list[tuple[Any, int]] = [(root, 0)]
    pop, push, tensor = stack.pop, stack.append, torch.Tensor
    while stack:
        obj, depth = pop()
        if isinstance(obj, tensor):
            out.append(obj)
            continue
        if depth > _MAX_DEPTH or id(obj) in seen:
            continue
        kind = _kind(type(obj))
        if kind == _LEAF:
            continue
        seen.add(id(obj))
        for _, child in reversed(_items(obj, kind)):
            push((child, depth + 1))
    return out


def walk_steps(
    root: Any, prefix: str = "self", *, every_path: bool = False, steps: bool = True
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
        if depth > _MAX_DEPTH or id(obj) in (above if every_path else seen):
            continue
        kind = _kind(type(obj))
        if kind == _LEAF:
            continue
        visits += 1
        if every_path and visits > _MAX_VISITS:
            return
        seen.add(id(obj))
        inner = above + (id(obj),) if every_path else above
        for step, child in reversed(_items(obj, kind)):
            stack.append((path + _label(step), trail + (step,) if steps else trail, child, depth + 1, inner))


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

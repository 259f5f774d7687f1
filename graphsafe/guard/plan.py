"""What a guard checks for one graph, built once at capture and read on every checked replay.

A :class:`GraphPlan` holds, for one captured graph:

* ``liveness``: ``(dead, handle)`` pairs, one per storage the graph reads and did not allocate;
  ``dead(handle)`` is true once the owner freed it.  On a real CUDA graph ``handle`` is a weak
  reference (the guard never keeps a storage alive, so it cannot hide a free); on the CPU
  emulator, whose graph itself holds each storage, it asks whether anything besides the graph
  still does (:meth:`ExternalBuffer.alive`).
* ``bindings``: ``(get, key)`` pairs, one per attribute path of the owner that held such a
  storage at capture; ``get(owner).untyped_storage().data_ptr()`` must still be ``key``.  The
  getters are compiled once from the state walk's steps (``lambda o: o.meta.kv_indices``).
* ``host``: the host values the capture froze (Triton scalars and grids, by argument name and
  by ``kernel.argument``, and any given to ``guard.capture``).

Only :meth:`GraphPlan.intact` and :meth:`GraphPlan.host_ok` run on the replay path; the
explanation of a failure is in :mod:`graphsafe.guard.diagnose`.
"""

from __future__ import annotations

import fnmatch
import keyword
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from ..capture.statewalk import Step, walk_steps
from ..engines.recording import ExternalBuffer, Launch, Recorder, TensorArg, freeze

__all__ = ["GraphPlan", "Watched", "HostValue", "build_plan", "getter"]

# (torch.Storage._expired goes through an eval: 3x slower); torch's stubs say it returns a storage: a bool
_expired = cast(Callable[[int], bool], torch.UntypedStorage._expired)
_use_count = torch._C._storage_Use_Count


def _held_by_graph_only(cdata: int) -> bool:
    """Emulator: the graph's own handle is the storage's last reference."""
    return _use_count(cdata) <= 1


@dataclass
class Watched:
    """One storage the graph reads and did not allocate, with the owner's paths to it at capture."""

    buf: ExternalBuffer
    impl: int  # the StorageImpl's address (its weak reference keeps it from being reused)
    paths: tuple[str, ...] = ()
    getters: tuple[Callable[[Any], Any], ...] = ()

    def name(self) -> str:
        """Its paths, for messages."""
        return ", ".join(self.paths) or "a tensor the owner did not hold"

    def where(self) -> str:
        """Its shortest path, for ``Finding.where``."""
        return self.paths[0] if self.paths else f"<tensor first used at {self.buf.first_use}>"

    def describe(self) -> str:
        b = self.buf
        kernels = ", ".join(b.kernels[:3]) + (" ..." if len(b.kernels) > 3 else "")
        return (
            f"{b.dtype.replace('torch.', '')}, {b.nbytes} bytes at {hex(b.address)}, "
            f"first used at {b.first_use or '?'} by {kernels or '?'}"
        )


@dataclass(frozen=True)
class HostValue:
    """A host value frozen at capture: ``values`` maps each distinct value to where it was seen."""

    name: str
    values: tuple[tuple[Any, str], ...]  # (frozen value, "kernel at file:line" or "given to guard.capture")

    @property
    def ambiguous(self) -> bool:
        return len(self.values) > 1


@dataclass(slots=True)
class GraphPlan:
    """Everything the guard checks for one graph (see the module docstring)."""

    key: Hashable
    engine: str
    name: str  # the owner's name in paths ("self")
    watched: list[Watched]
    host: dict[str, HostValue]
    liveness: tuple[tuple[Callable[[Any], bool], Any], ...] = ()
    bindings: tuple[tuple[Callable[[Any], Any], int], ...] = ()
    host_expect: dict[str, Any] = field(default_factory=dict)  # unambiguous names only
    left: int = 1  # replays until the next check; the first replay is checked
    checks: int = 0  # checks made so far
    replays_at_last_check: int = -1  # -1: none since capture
    _handles: list = field(default_factory=list)  # the weak references liveness reads

    def intact(self, owner: Any) -> bool:
        """Is every storage alive and still at each of its paths?  (The replay path: no diagnosis.)"""
        try:
            for dead, handle in self.liveness:
                if dead(handle):
                    return False
            for get, key in self.bindings:
                if get(owner).untyped_storage().data_ptr() != key:
                    return False
        except Exception:  # a path that no longer resolves to a tensor: the diagnosis says which
            return False
        return True

    def host_ok(self, values: Mapping[str, Any]) -> bool:
        expect = self.host_expect
        for name, v in values.items():
            if name not in expect or freeze(v) != expect[name]:
                return False
        return True


def _literal(step: Step) -> str | None:
    """``step`` as Python source (``.name`` or ``[key]``), or None when its key has no literal form."""
    is_item, k = step
    if not is_item:
        return f".{k}" if isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k) else None
    if type(k) in (int, str):  # their repr is a literal that evaluates back to them
        return f"[{k!r}]"
    return None


def getter(steps: tuple[Step, ...]) -> Callable[[Any], Any]:
    """A function reading ``steps`` from an object.

    Compiled to ``lambda o: o.meta.bufs['x']`` when every step has a literal form (identifier
    attributes, int and str keys): faster than a chain of getters, which is the fallback
    (``benchmarks/guard_overhead.py`` measures the guard).
    """
    source = [_literal(step) for step in steps]
    if all(part is not None for part in source):
        return eval("lambda o: o" + "".join(p for p in source if p is not None), {})  # noqa: S307 - identifiers and int/str literals only
    parts = [operator.itemgetter(k) if is_item else (lambda o, _k=k: getattr(o, _k)) for is_item, k in steps]

    def get(obj: Any) -> Any:
        for part in parts:
            obj = part(obj)
        return obj

    return get


def _host_values(launches: Iterable[Launch], given: Mapping[str, Any] | None) -> dict[str, HostValue]:
    seen: dict[str, dict[Any, str]] = {}
    for launch in launches:
        if launch.kind != "triton":
            continue
        items = [(n, v) for n, v in launch.args.items() if not _is_tensor_arg(v)]
        if launch.grid is not None:
            items.append(("grid", launch.grid))
        for n, v in items:
            for name in (n, f"{launch.name}.{n}"):
                seen.setdefault(name, {}).setdefault(v, f"{launch.name} at {launch.where or '?'}")
    table = {name: HostValue(name, tuple(vals.items())) for name, vals in seen.items()}
    for name, v in (given or {}).items():
        table[name] = HostValue(name, ((freeze(v), "given to guard.capture"),))
    return table


def _is_tensor_arg(v: Any) -> bool:
    return isinstance(v, TensorArg) or (isinstance(v, tuple) and any(isinstance(x, TensorArg) for x in v))


def _liveness(buf: ExternalBuffer) -> tuple[Callable[[Any], bool], int, Any]:
    """``(dead, handle, keep)``: ``dead(handle)`` tests the storage (``handle`` is its StorageImpl's
    address); ``keep`` must outlive the check."""
    if buf.handle is not None:  # emulator: the graph holds the storage itself
        return _held_by_graph_only, buf.handle._cdata, buf.handle
    return _expired, buf.weak.cdata, buf.weak


def build_plan(
    key: Hashable,
    recorders: list[Recorder],
    owner: Any,
    *,
    name: str = "self",
    ignore: Iterable[str] = (),
    host_values: Mapping[str, Any] | None = None,
) -> GraphPlan:
    """The plan for the graph whose capture ``recorders`` saw, with paths from ``owner`` as it is now."""
    external: dict[int, ExternalBuffer] = {}
    launches: list[Launch] = []
    for rec in recorders:
        external.update(rec.external)
        launches.extend(rec.launches)
    paths: dict[int, list[tuple[str, tuple[Step, ...]]]] = {}
    if owner is not None:
        patterns = tuple(ignore)
        for path, steps, t in walk_steps(owner, name, every_path=True):
            if t.untyped_storage().nbytes() == 0 or any(fnmatch.fnmatchcase(path, p) for p in patterns):
                continue
            k = t.untyped_storage().data_ptr()
            if k in external:
                paths.setdefault(k, []).append((path, steps))
    watched: list[Watched] = []
    liveness: list[tuple[Callable[[int], bool], int]] = []
    bindings: list[tuple[Callable[[Any], Any], int]] = []
    handles: list[Any] = []
    for k, buf in external.items():
        at = sorted(paths.get(k, []), key=lambda ps: (len(ps[1]), ps[0]))  # the shortest path names it
        dead, handle, keep = _liveness(buf)
        w = Watched(buf, handle, tuple(p for p, _ in at), tuple(getter(s) for _, s in at))
        watched.append(w)
        liveness.append((dead, handle))
        handles.append(keep)
        bindings.extend((g, k) for g in w.getters)
    if any(r.mode == "emulate" for r in recorders):
        engine = "emulate"
    else:  # a CUDA graph (engine "cuda" or torch.cuda.graph), or the guard's own recording of a CPU run
        engine = "cuda" if any(b.device.startswith("cuda") for b in external.values()) else "cpu"
    host = _host_values(launches, host_values)
    plan = GraphPlan(
        key,
        engine,
        name,
        watched,
        host,
        tuple(liveness),
        tuple(bindings),
        {n: h.values[0][0] for n, h in host.items() if not h.ambiguous},
    )
    plan._handles = handles
    return plan

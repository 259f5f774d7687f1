"""Why a guarded graph failed its check, as graphsafe findings (off the replay path).

For each storage the graph reads: freed since capture is ``stale-pointer`` (the graph reads
an address the allocator may hand to anyone); alive but no longer at an attribute path that
held it at capture is ``unpersisted-metadata`` (the owner rebound the path, so this step's
values went to a tensor the graph does not read); a host value the runner passes that
differs from the one the capture froze is ``frozen-host-value``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..capture.statewalk import paths_by_storage
from ..engines.recording import freeze
from ..errors import UsageError
from ..findings import Finding, FindingKind
from .plan import GraphPlan, Watched

__all__ = ["diagnose"]


def _now(w: Watched, owner: Any) -> list[tuple[str, int | None, int | None, str]]:
    """``(path, storage address, StorageImpl address, what the path holds now)`` for each path of ``w``
    (the addresses are None where the path no longer holds a tensor)."""
    out: list[tuple[str, int | None, int | None, str]] = []
    for path, get in zip(w.paths, w.getters):
        try:
            t = get(owner)
        except Exception as e:  # noqa: BLE001 - a path that no longer resolves is the finding
            out.append((path, None, None, f"{path} no longer resolves ({type(e).__name__}: {e})"))
            continue
        if not isinstance(t, torch.Tensor):
            out.append((path, None, None, f"{path} now holds {type(t).__name__}, not a tensor"))
            continue
        k = t.untyped_storage().data_ptr()
        address = torch._C._storage_address(t)  # type: ignore[attr-defined]  # private binding, not in torch's stubs
        out.append((path, k, address, f"{path} now holds a tensor at {hex(k)}"))
    return out


def _window(plan: GraphPlan, replay: int) -> str:
    last = plan.replays_at_last_check
    since = "capture" if last < 0 else f"replay {last} (the last check, which passed)"
    return f"graph {plan.key!r}, replay {replay}; intact at {since}"


def _joined(parts: list[str], most: int = 3) -> str:
    more = f" | and {len(parts) - most} more (see details)" if len(parts) > most else ""
    return " | ".join(parts[:most]) + more


def _finding(kind: FindingKind, message: str, where: str, plan: GraphPlan, replay: int, details: dict) -> Finding:
    details = {
        "graph_key": repr(plan.key),
        "replay": replay,
        "last_good_replay": plan.replays_at_last_check,
        "source": "graphsafe.guard",
        **details,
    }
    return Finding(
        kind=kind,
        message=message,
        where=where,
        probe="guard",
        engine=plan.engine,
        capture_size=plan.key if isinstance(plan.key, int) and not isinstance(plan.key, bool) else 0,
        details=details,
    )


def _pointer_findings(plan: GraphPlan, owner: Any, replay: int) -> list[Finding]:
    freed, rebound = [], []
    held_now: dict[int, list[str]] | None = None  # storage -> the owner's paths to it now (walked once, if needed)
    for w in plan.watched:
        now = _now(w, owner) if owner is not None else []
        key = w.buf.key
        if not w.buf.alive():
            repl = [
                text + (" (the same address, reused by the allocator)" if k == key else "") for _, k, _, text in now
            ]
            freed.append(
                (w, f"{w.name()} ({w.describe()}) was freed after capture" + "".join(f"; {r}" for r in repl), repl)
            )
            continue
        moved = [(p, text) for p, k, impl, text in now if k != key and impl != w.impl]
        resized = [p for p, k, impl, _ in now if k != key and impl == w.impl]
        if resized:  # the same storage, its memory reallocated (resize_): the graph reads the old memory
            freed.append(
                (
                    w,
                    f"{w.name()} ({w.describe()}) was reallocated in place after capture (resize_ of its "
                    f"storage): {resized[0]} now has its memory at another address",
                    [],
                )
            )
        elif moved:
            if held_now is None:
                held_now = paths_by_storage(owner, plan.name)
            kept = held_now.get(key, [])
            held = f", still held at {', '.join(kept[:3])}" if kept else ", still alive"
            rebound.append(
                (
                    w,
                    moved[0][0],
                    f"{', '.join(p for p, _ in moved)} rebound after capture: the graph reads the captured tensor "
                    f"({w.describe()}){held}, while {'; '.join(t for _, t in moved)}",
                    [t for _, t in moved],
                )
            )
    out = []
    if freed:
        out.append(
            _finding(
                FindingKind.STALE_POINTER,
                "the graph reads freed memory: " + _joined([m for _, m, _ in freed]) + f" ({_window(plan, replay)})",
                freed[0][0].where(),
                plan,
                replay,
                {
                    "dead": [
                        {
                            "path": w.where(),
                            "address": hex(w.buf.address),
                            "first_use": w.buf.first_use,
                            "kernels": list(w.buf.kernels),
                            "replacement": repl,
                        }
                        for w, _, repl in freed
                    ]
                },
            )
        )
    if rebound:
        out.append(
            _finding(
                FindingKind.UNPERSISTED_METADATA,
                "the graph reads tensors the owner no longer holds there, so this step's values go where the graph "
                "does not read: " + _joined([m for _, _, m, _ in rebound]) + f" ({_window(plan, replay)})",
                rebound[0][1],
                plan,
                replay,
                {
                    "rebound": [
                        {
                            "path": p,
                            "address": hex(w.buf.address),
                            "first_use": w.buf.first_use,
                            "kernels": list(w.buf.kernels),
                            "now": now,
                        }
                        for w, p, _, now in rebound
                    ]
                },
            )
        )
    return out


def _host_findings(plan: GraphPlan, values: Mapping[str, Any], replay: int) -> list[Finding]:
    out = []
    for name, v in values.items():
        hv = plan.host.get(name)
        if hv is None:
            known = sorted(n for n in plan.host if "." not in n)
            raise UsageError(
                f"host value {name!r} is not an argument of any Triton launch graph {plan.key!r} captured, "
                f"nor given to guard.capture(host_values=...); known names: {', '.join(known) or 'none'}"
            )
        if hv.ambiguous:
            seen = "; ".join(f"{val!r} by {at}" for val, at in hv.values)
            raise UsageError(
                f"host value {name!r} was captured with several values ({seen}); "
                "name one kernel's argument as 'kernel.argument'"
            )
        captured, at = hv.values[0]
        given = freeze(v)
        if given != captured:
            out.append(
                _finding(
                    FindingKind.FROZEN_HOST_VALUE,
                    f"{name}: captured {captured!r}, this replay needs {given!r} (frozen into the graph by {at}; "
                    f"{_window(plan, replay)})",
                    name,
                    plan,
                    replay,
                    {"name": name, "captured": captured, "needed": given, "at": at},
                )
            )
    return out


def diagnose(plan: GraphPlan, owner: Any, host_values: Mapping[str, Any] | None, replay: int) -> list[Finding]:
    """The findings of a check that failed (``[]`` if it passes on a second look)."""
    out = _pointer_findings(plan, owner, replay)
    if host_values:
        out.extend(_host_findings(plan, host_values, replay))
    return out

"""Compare graph outputs with eager outputs: fast on success, detailed on failure.

:func:`compare` and :func:`compare_many` work on tensors; a :class:`Comparator` knows a
check's spec and :class:`Tolerance` and compares one step (live outputs and static state),
naming positions as (request, token) for outputs and (block, request, token block) for KV caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..contract import Batch, CaptureSpec
from ..findings import Mismatch

__all__ = ["Tolerance", "Comparator", "tolerances", "reorder_tolerances", "compare", "compare_many", "Locator"]


@dataclass(frozen=True)
class Tolerance:
    """How close graph and eager must be: ``rtol``/``atol`` (None: ``torch.testing.assert_close``'s
    default for the dtype), or ``bitwise`` equality (NaN equals NaN).

    Example::

        graphsafe.check(MyBackend, tolerance=graphsafe.Tolerance(bitwise=True))
    """

    rtol: float | None = None
    atol: float | None = None
    bitwise: bool = False

    @property
    def is_default(self) -> bool:
        return self == Tolerance()

# (rtol, atol) per dtype, as torch.testing.assert_close uses by default.
_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}

Locator = Callable[[int], dict]  # flat row index -> {"request": r, "token": t} (or other coordinates)


# (rtol, atol) per dtype that a reordered reduction (another split count, another block order) stays within
_REORDER = {
    torch.float64: (1e-6, 1e-7),
    torch.float32: (2e-4, 2e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
}


def reorder_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """How far a reordered reduction may move a result of ``dtype``: wider than the default tolerance."""
    return _REORDER.get(dtype, (5e-2, 1e-2) if dtype.is_floating_point else (0.0, 0.0))


def tolerances(dtype: torch.dtype, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """Default (rtol, atol) for ``dtype``; fp8 and other narrow floats compare with bf16's."""
    r, a = _TOL.get(dtype, (1.6e-2, 1e-5) if dtype.is_floating_point else (0.0, 0.0))
    return (r if rtol is None else rtol, a if atol is None else atol)


def _close(g: torch.Tensor, e: torch.Tensor, rtol: float, atol: float, bitwise: bool) -> torch.Tensor:
    if bitwise or not g.dtype.is_floating_point:
        if g.dtype.is_floating_point:
            return (g == e) | (g.isnan() & e.isnan())
        return g == e
    gf, ef = g.float(), e.float()
    return torch.isclose(gf, ef, rtol=rtol, atol=atol, equal_nan=True)


def compare(
    name: str,
    graph: torch.Tensor,
    eager: torch.Tensor,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    bitwise: bool = False,
    locate: Locator | None = None,
    max_positions: int = 8,
) -> Mismatch | None:
    """None when ``graph`` matches ``eager``; else a :class:`Mismatch` with the first positions.

    Shapes must agree; a shape difference is itself a mismatch (count = all).
    """
    if graph.shape != eager.shape:
        return Mismatch(
            tensor=name, count=max(graph.numel(), eager.numel()), total=max(graph.numel(), eager.numel()),
            max_abs=float("inf"), max_rel=float("inf"),
            first=[{"note": f"shape {tuple(graph.shape)} (graph) vs {tuple(eager.shape)} (eager)"}],
        )
    if graph.numel() == 0:
        return None
    r, a = tolerances(eager.dtype, rtol, atol)
    if eager.device != graph.device:
        eager = eager.to(graph.device)
    ok = _close(graph, eager, r, a, bitwise)
    if bool(ok.all()):
        return None
    bad = (~ok).reshape(-1)
    idx = bad.nonzero().reshape(-1)
    gf = graph.reshape(-1).float() if graph.dtype.is_floating_point else graph.reshape(-1).double()
    ef = eager.reshape(-1).float() if eager.dtype.is_floating_point else eager.reshape(-1).double()
    diff = (gf - ef).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    rel = diff / ef.abs().clamp_min(1e-12)
    max_abs = float(diff[idx].max())
    max_rel = float(rel[idx].max())
    row_size = int(graph[0].numel()) if graph.dim() > 0 and graph.shape[0] > 0 else 1
    first = []
    for i in idx[:max_positions].tolist():
        pos = {"index": list(_unravel(i, tuple(graph.shape))), "graph": float(gf[i]), "eager": float(ef[i])}
        if locate is not None:
            pos.update(locate(i // max(row_size, 1)))
        first.append(pos)
    return Mismatch(name, int(idx.numel()), int(graph.numel()), max_abs, max_rel, first)


def compare_many(
    pairs: list[tuple[str, torch.Tensor, torch.Tensor, Locator | None]],
    *,
    rtol: float | None = None,
    atol: float | None = None,
    bitwise: bool = False,
) -> list[Mismatch]:
    """:func:`compare` over ``(name, graph, eager, locate)`` pairs, with one host read for all verdicts.

    The per-step path compares several outputs and static tensors; reading each
    verdict back separately costs a device synchronisation per tensor.  Here every
    verdict stays on the device until one ``tolist()``, and only the pairs that
    differ (or whose shapes differ) get the detailed :func:`compare`.
    """
    bad, verdicts, pending = [], [], []  # indices into pairs
    for i, (_, g, e, _loc) in enumerate(pairs):
        if g.shape != e.shape:
            bad.append(i)
        elif g.numel() > 0:
            r, a = tolerances(e.dtype, rtol, atol)
            verdicts.append(_close(g, e.to(g.device), r, a, bitwise).all())
            pending.append(i)
    if verdicts:
        bad += [i for i, good in zip(pending, torch.stack(verdicts).tolist()) if not good]
    found = []
    for i in sorted(bad):
        name, g, e, loc = pairs[i]
        m = compare(name, g, e, rtol=rtol, atol=atol, bitwise=bitwise, locate=loc)
        if m is not None:
            found.append(m)
    return found


def _unravel(i: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for s in reversed(shape):
        out.append(i % s)
        i //= s
    return tuple(reversed(out))


class Comparator:
    """One check's comparisons: the spec names positions, the tolerance decides what differs."""

    def __init__(self, spec: CaptureSpec, tolerance: Tolerance = Tolerance()):
        self.spec, self.tolerance = spec, tolerance

    @staticmethod
    def rows(batch: Batch) -> Locator:
        """Token row -> ``{"request": r, "token": t}`` (``-1`` for padded rows)."""
        return lambda row: dict(zip(("request", "token"), batch.token_owner(row)))

    def blocks(self, batch: Batch, t: torch.Tensor) -> Locator | None:
        """For a tensor with one row per KV block: block -> owning request and token block, else None."""
        if not (t.dim() > 0 and t.shape[0] == self.spec.num_blocks):
            return None
        bs = self.spec.block_size

        def loc(row: int) -> dict:  # only called for a mismatch: the owner map is built then
            owner = {b: (r, i) for r, table_row in enumerate(batch.block_table) for i, b in enumerate(table_row)}
            r, i = owner.get(row, (-1, -1))
            return {"block": row, "request": r, "token_block": i, "first_token": i * bs if r >= 0 else -1}

        return loc

    def outputs(self, a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], batch: Batch, *,
                bitwise: bool | None = None) -> list[Mismatch]:
        """Live outputs ``a`` against ``b`` (``bitwise`` overrides the tolerance's)."""
        rows = self.rows(batch)
        t = self.tolerance
        return compare_many([(f"output[{i}]", x, y, rows) for i, (x, y) in enumerate(zip(a, b))],
                            rtol=t.rtol, atol=t.atol, bitwise=t.bitwise if bitwise is None else bitwise)

    def step(self, live_a: Sequence[torch.Tensor], live_b: Sequence[torch.Tensor], static_a: dict[str, torch.Tensor],
             static_b: dict[str, torch.Tensor], batch: Batch, *, reorder: bool = False) -> list[Mismatch]:
        """One step: live outputs, then static tensors, every verdict read back at once (with ``reorder``,
        at the wider tolerance a reordered reduction stays within)."""
        rows = self.rows(batch)
        pairs = [(f"output[{i}]", a, b, rows) for i, (a, b) in enumerate(zip(live_a, live_b))]
        pairs += [(f"static[{name!r}]", a, static_b[name], self.blocks(batch, a))
                  for name, a in static_a.items() if name in static_b]
        t = self.tolerance
        if reorder:
            out = [m for m in (compare(n, a, b, locate=loc, **dict(zip(("rtol", "atol"), reorder_tolerances(b.dtype))))
                               for n, a, b, loc in pairs) if m is not None]
        else:
            out = compare_many(pairs, rtol=t.rtol, atol=t.atol, bitwise=t.bitwise)
        if len(live_a) != len(live_b):
            at = sum(1 for m in out if m.tensor.startswith("output["))
            out.insert(at, Mismatch("outputs", 1, 1, float("inf"), float("inf"),
                                    [{"note": f"{len(live_a)} outputs (graph) vs {len(live_b)} (eager)"}]))
        return out

"""Compare graph outputs with eager outputs: fast on success, detailed on failure.

:func:`compare` and :func:`compare_many` work on tensors, in pieces of :func:`piece_elems`
elements, so that comparing a multi-GB static tensor needs temporaries of a few pieces only
(on the CPU a tensor or piece that is equal costs one ``torch.equal``); with ``rows`` they compare
only those rows.  A :class:`Comparator` knows a check's spec and :class:`Tolerance` and compares
one step (live outputs and static state; a large paged KV cache only in the example's region of
blocks), naming positions as (request, token) for outputs and (block, request, token block) for
KV caches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

from ..contract import Batch, CaptureSpec
from ..findings import Mismatch
from . import gpu_verdict
from .tolerance import Tolerance, reorder_tolerances, tolerances

__all__ = [
    "Tolerance",
    "Comparator",
    "tolerances",
    "reorder_tolerances",
    "compare",
    "compare_many",
    "verdicts",
    "identical",
    "piece_elems",
    "Locator",
    "WHOLE_BELOW",
]


Locator = Callable[[int], dict]  # flat row index -> {"request": r, "token": t} (or other coordinates)


def _close(g: torch.Tensor, e: torch.Tensor, rtol: float, atol: float, bitwise: bool) -> torch.Tensor:
    if bitwise or not g.dtype.is_floating_point:
        if g.dtype.is_floating_point:
            return (g == e) | (g.isnan() & e.isnan())
        return g == e
    gf, ef = g.float(), e.float()
    return torch.isclose(gf, ef, rtol=rtol, atol=atol, equal_nan=True)


#: elements per comparison piece: on the CPU at most 2**20, on a GPU 2**22, else 1/64 of the tensor (at
#: least 2**16), so that a comparison's temporaries stay a small part of a large static tensor
_PIECE = {"cpu": 1 << 20, "cuda": 1 << 22}


def piece_elems(t: torch.Tensor) -> int:
    """Elements per piece when ``t`` is compared (or saved) piece by piece."""
    return min(_PIECE.get(t.device.type, 1 << 20), max(1 << 16, t.numel() >> 6))


@dataclass
class _Piece:
    """Flat parts of graph and eager; element k sits at flat index ``base + k`` of the whole tensor,
    or with ``rows`` (dim-0 indices of the tensor) at ``rows[k // row] * row + k % row``."""

    g: torch.Tensor
    e: torch.Tensor
    base: int = 0
    rows: torch.Tensor | None = None
    row: int = 1

    def index(self, k: torch.Tensor) -> torch.Tensor:
        if self.rows is None:
            return k + self.base
        return self.rows[k // self.row] * self.row + k % self.row

    def same(self) -> bool:
        """Cheap proof of equality on the CPU (a GPU verdict stays on the device instead)."""
        return (
            self.g.device.type == "cpu"
            and self.e.device.type == "cpu"
            and self.g.dtype == self.e.dtype
            and torch.equal(self.g, self.e)
        )


def _pieces(g: torch.Tensor, e: torch.Tensor, rows: torch.Tensor | None = None) -> Iterator[_Piece]:
    """``g`` and ``e`` (same shape) in flat pieces of :func:`piece_elems`; with ``rows``, only those
    dim-0 rows (gathered a few at a time)."""
    if g.dim() == 0:
        yield _Piece(g.reshape(1), e.reshape(1).to(g.device))
        return
    n, row = piece_elems(g), max(1, g[0].numel() if g.shape[0] else 1)
    per = max(1, n // row)  # rows per piece
    if rows is not None:
        rows = rows.to(g.device)
        for i in range(0, rows.numel(), per):
            idx = rows[i : i + per]
            yield _Piece(
                g.index_select(0, idx).reshape(-1),
                e.index_select(0, idx.to(e.device)).reshape(-1).to(g.device),
                rows=idx,
                row=row,
            )
    elif g.is_contiguous() and e.is_contiguous():
        gf, ef = g.view(-1), e.view(-1)
        for s in range(0, gf.numel(), n):
            yield _Piece(gf[s : s + n], ef[s : s + n].to(g.device), base=s)
    else:
        for r in range(0, g.shape[0], per):
            yield _Piece(g[r : r + per].reshape(-1), e[r : r + per].reshape(-1).to(g.device), base=r * row)


def _verdict(
    g: torch.Tensor, e: torch.Tensor, rtol: float, atol: float, bitwise: bool, rows: torch.Tensor | None = None
) -> torch.Tensor:
    """A boolean on ``g``'s device: every (compared) element close.  Nothing read back to the host."""
    if rows is None and _Piece(g, e).same():  # one pass over a CPU tensor that is equal (the usual case)
        return torch.ones((), dtype=torch.bool)
    oks = [_close(p.g, p.e, rtol, atol, bitwise).all() for p in _pieces(g, e, rows) if not p.same()]
    if not oks:
        return torch.ones((), dtype=torch.bool, device=g.device)
    return oks[0] if len(oks) == 1 else torch.stack(oks).all()


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
    rows: torch.Tensor | None = None,
) -> Mismatch | None:
    """None when ``graph`` matches ``eager``; else a :class:`Mismatch` with the first positions.

    Shapes must agree; a shape difference is itself a mismatch (count = all).  With ``rows`` (dim-0
    indices, ascending) only those rows are compared, and ``total`` counts their elements.  Large
    tensors are compared in pieces: temporaries stay a few pieces, whatever the size.
    """
    if graph.shape != eager.shape:
        return Mismatch(
            tensor=name,
            count=max(graph.numel(), eager.numel()),
            total=max(graph.numel(), eager.numel()),
            max_abs=float("inf"),
            max_rel=float("inf"),
            first=[{"note": f"shape {tuple(graph.shape)} (graph) vs {tuple(eager.shape)} (eager)"}],
        )
    if graph.numel() == 0:
        return None
    r, a = tolerances(eager.dtype, rtol, atol)
    row_size = int(graph[0].numel()) if graph.dim() > 0 and graph.shape[0] > 0 else 1
    count = total = 0
    maxima: list[torch.Tensor] = []  # (max abs, max rel) per piece; NaN wins, as over one whole tensor
    first: list[dict] = []
    for p in _pieces(graph, eager, rows):
        total += p.g.numel()
        if p.same():
            continue
        bad = (~_close(p.g, p.e, r, a, bitwise)).nonzero().reshape(-1)
        if bad.numel() == 0:
            continue
        gf = p.g[bad].float() if graph.dtype.is_floating_point else p.g[bad].double()
        ef = p.e[bad].float() if eager.dtype.is_floating_point else p.e[bad].double()
        diff = (gf - ef).abs()
        diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
        rel = diff / ef.abs().clamp_min(1e-12)
        maxima.append(torch.stack([diff.max(), rel.max()]))
        count += int(bad.numel())
        take = max_positions - len(first)
        for k, i in enumerate(p.index(bad[:take]).tolist() if take > 0 else []):
            pos = {"index": list(_unravel(i, tuple(graph.shape))), "graph": float(gf[k]), "eager": float(ef[k])}
            if locate is not None:
                pos.update(locate(i // max(row_size, 1)))
            first.append(pos)
    if count == 0:
        return None
    max_abs, max_rel = torch.stack(maxima).amax(dim=0).tolist()
    return Mismatch(name, count, total, max_abs, max_rel, first)


def compare_many(
    pairs: list[tuple],
    *,
    rtol: float | None = None,
    atol: float | None = None,
    bitwise: bool = False,
) -> list[Mismatch]:
    """:func:`compare` over ``(name, graph, eager, locate[, rows])`` pairs, with one host read for all verdicts.

    The per-step path compares several outputs and static tensors; reading each
    verdict back separately costs a device synchronisation per tensor.  Here every
    verdict stays on the device until one ``tolist()`` (:func:`verdicts`), and only
    the pairs that differ (or whose shapes differ) get the detailed :func:`compare`.
    """
    bad, items, pending = [], [], []  # indices into pairs
    for i, (_, g, e, _loc, *rows) in enumerate(pairs):
        if g.shape != e.shape:
            bad.append(i)
        elif g.numel() > 0:
            items.append((g, e, *tolerances(e.dtype, rtol, atol), rows[0] if rows else None))
            pending.append(i)
    if items:
        bad += [i for i, good in zip(pending, verdicts(items, bitwise)) if not good]
    found = []
    for i in sorted(bad):
        name, g, e, loc, *rows = pairs[i]
        m = compare(name, g, e, rtol=rtol, atol=atol, bitwise=bitwise, locate=loc, rows=rows[0] if rows else None)
        if m is not None:
            found.append(m)
    return found


def identical(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    """Are ``a`` and ``b`` equal tensor by tensor, value for value (one ``torch.equal`` each)?  True means
    a bitwise comparison finds nothing; False (a NaN, any difference) means: compare them.  For pairs that
    are almost always equal (two replays of one batch) this is the cheap first question."""
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b)
    )


#: pairs of at most this many elements are compared together on a GPU (one closeness test per kind of
#: comparison, not one per pair); larger ones piece by piece
FUSE_BELOW = 1 << 16
#: compare small pairs together on the CPU too (off: there a pair that is equal costs one ``torch.equal``,
#: cheaper than joining it with others; tests turn it on to check the joined form against the single one)
FUSE_ON_CPU = False


def verdicts(items: Sequence[tuple], bitwise: bool = False) -> list[bool]:
    """For ``(graph, eager, rtol, atol, rows)`` items of equal shapes: is each close?  One host read.

    On a GPU each pair without ``rows`` is one Triton launch (:mod:`graphsafe.capture.gpu_verdict`);
    elsewhere (a CPU, the interpreter, no Triton) the small pairs without ``rows`` are joined per kind of
    comparison when :data:`FUSE_ON_CPU` says so (exact for integers, NaN-equal for ``bitwise`` floats, else
    ``isclose`` at one (rtol, atol)): one flat copy of each side, one closeness test and one reduction per
    pair.  The answer is the same as :func:`compare`'s, pair by pair.
    """
    if not items:
        return []
    out: list[torch.Tensor | None] = [None] * len(items)
    fast = [i for i, (g, e, _r, _a, rows) in enumerate(items) if rows is None and gpu_verdict.usable(g, e)]
    counts = None
    if fast:
        counts = gpu_verdict.count_bad([(items[i][0], items[i][1], items[i][2], items[i][3], bitwise) for i in fast])
        if len(fast) == len(items):  # the usual step on a GPU: one read of the counts
            return [c == 0 for c in counts.tolist()]
    groups: dict[tuple, list[int]] = {}
    done = set(fast)  # counted by the kernel
    for i, (g, e, r, a, rows) in enumerate(items):
        if i in done:
            continue
        if rows is None and g.numel() <= FUSE_BELOW and (g.device.type != "cpu" or FUSE_ON_CPU):
            kind = "exact" if not g.dtype.is_floating_point else "bitwise" if bitwise else "close"
            groups.setdefault(
                (g.device, kind, r if kind == "close" else 0.0, a if kind == "close" else 0.0), []
            ).append(i)
        else:
            out[i] = _verdict(g, e, r, a, bitwise, rows)
    for (device, kind, r, a), idx in groups.items():
        flat = [(items[i][0].reshape(-1), items[i][1].reshape(-1).to(device)) for i in idx]
        if kind == "close":  # compared in float32, as _close does
            flat = [(g.float(), e.float()) for g, e in flat]
        gs = torch.cat([g for g, _ in flat]) if len(flat) > 1 else flat[0][0]
        es = torch.cat([e for _, e in flat]) if len(flat) > 1 else flat[0][1]
        if kind == "close":
            close = torch.isclose(gs, es, rtol=r, atol=a, equal_nan=True)
        elif kind == "bitwise":
            close = (gs == es) | (gs.isnan() & es.isnan())
        else:
            close = gs == es
        start = 0
        for i, (g, _) in zip(idx, flat):
            out[i] = close[start : start + g.numel()].all()
            start += g.numel()
    rest = [i for i in range(len(items)) if out[i] is not None]
    verdicts = [v for v in out if v is not None]  # in the order of rest
    device = verdicts[0].device
    read = torch.stack([v.to(device) for v in verdicts])
    if counts is not None:  # both kinds of verdict in one read
        read = torch.cat([counts.to(device) == 0, read])
        rest = fast + rest
    got = dict(zip(rest, read.tolist()))
    return [bool(got[i]) for i in range(len(items))]


def _unravel(i: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for s in reversed(shape):
        out.append(i % s)
        i //= s
    return tuple(reversed(out))


#: static tensors smaller than this are compared whole at every step, paged or not
WHOLE_BELOW = 1 << 20


class Comparator:
    """One check's comparisons: the spec names positions, the tolerance decides what differs.

    A static tensor whose first dimension is ``spec.num_blocks`` is a paged KV cache: from
    ``whole_below`` bytes on, a step compares only the rows of its example's :meth:`region`
    (the blocks a step can touch), and :meth:`statics` compares everything once at the example's end.
    """

    def __init__(self, spec: CaptureSpec, tolerance: Tolerance = Tolerance(), whole_below: int = WHOLE_BELOW):
        self.spec, self.tolerance, self.whole_below = spec, tolerance, whole_below

    def paged(self, t: torch.Tensor) -> bool:
        """Is ``t`` a paged cache compared by region (one row per KV block, ``whole_below`` bytes or more)?"""
        return t.dim() > 0 and t.shape[0] == self.spec.num_blocks and t.numel() * t.element_size() >= self.whole_below

    def region(self, statics: dict[str, torch.Tensor], batches: Iterable[Batch]) -> torch.Tensor | None:
        """The blocks the steps of an example can touch in a paged cache: the blocks of ``batches``
        (the example's steps and the capture batches) and the null block 0, ascending; None when no
        static tensor is compared by region."""
        paged = [t for t in statics.values() if self.paged(t)]
        if not paged:
            return None
        blocks = {0} | {b for batch in batches for row in batch.block_table for b in row}
        return torch.tensor(sorted(blocks), dtype=torch.int64, device=paged[0].device)

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

    def outputs(
        self, a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], batch: Batch, *, bitwise: bool | None = None
    ) -> list[Mismatch]:
        """Live outputs ``a`` against ``b`` (``bitwise`` overrides the tolerance's)."""
        rows = self.rows(batch)
        t = self.tolerance
        return compare_many(
            [(f"output[{i}]", x, y, rows) for i, (x, y) in enumerate(zip(a, b))],
            rtol=t.rtol,
            atol=t.atol,
            bitwise=t.bitwise if bitwise is None else bitwise,
        )

    def step(
        self,
        live_a: Sequence[torch.Tensor],
        live_b: Sequence[torch.Tensor],
        static_a: dict[str, torch.Tensor],
        static_b: dict[str, torch.Tensor],
        batch: Batch,
        region: torch.Tensor | None = None,
        *,
        reorder: bool = False,
    ) -> list[Mismatch]:
        """One step: live outputs, then static tensors (paged caches only in ``region`` when given),
        every verdict read back at once; with ``reorder``, at the wider tolerance a reordered reduction
        stays within."""
        rows = self.rows(batch)
        pairs = [(f"output[{i}]", a, b, rows) for i, (a, b) in enumerate(zip(live_a, live_b))]
        out = self._compare(pairs + self._static_pairs(static_a, static_b, batch, region), reorder)
        if len(live_a) != len(live_b):
            at = sum(1 for m in out if m.tensor.startswith("output["))
            out.insert(
                at,
                Mismatch(
                    "outputs",
                    1,
                    1,
                    float("inf"),
                    float("inf"),
                    [{"note": f"{len(live_a)} outputs (graph) vs {len(live_b)} (eager)"}],
                ),
            )
        return out

    def statics(
        self, static_a: dict[str, torch.Tensor], static_b: dict[str, torch.Tensor], batch: Batch
    ) -> list[Mismatch]:
        """Whole paged caches (in pieces), at the end of an example whose steps compared only their regions;
        every other static tensor was compared whole at each step."""
        pairs = self._static_pairs(static_a, static_b, batch, None)
        return self._compare([p for p in pairs if self.paged(p[1])])

    def _static_pairs(
        self,
        static_a: dict[str, torch.Tensor],
        static_b: dict[str, torch.Tensor],
        batch: Batch,
        region: torch.Tensor | None,
    ) -> list[tuple]:
        return [
            (
                f"static[{name!r}]",
                a,
                static_b[name],
                self.blocks(batch, a),
                region if region is not None and self.paged(a) else None,
            )
            for name, a in static_a.items()
            if name in static_b
        ]

    def _compare(self, pairs: list[tuple], reorder: bool = False) -> list[Mismatch]:
        t = self.tolerance
        if reorder:  # each pair at its own dtype's reordering tolerance
            found: list[Mismatch] = []
            for p in pairs:
                rtol, atol = reorder_tolerances(p[2].dtype)
                found += compare_many([p], rtol=rtol, atol=atol)
            return found
        return compare_many(pairs, rtol=t.rtol, atol=t.atol, bitwise=t.bitwise)

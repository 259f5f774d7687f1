"""unpersisted-metadata: the graph reads a buffer that did not hold this batch's values, while this
step's prepare wrote them elsewhere.

Uses the same write ledger as lazy-init, region by region of what the graph reads: a region this
step's prepare did not write for this batch (not at all, or only on alternate calls, as a double
buffer does) and that an earlier prepare wrote (at capture, or an earlier step).  Where the values
went is named when it can be found: a rebound attribute, the other copy in the same allocation, a
buffer at the same path but for a container index, or what an eager run of this batch reads at
the same kernel argument.  A region nothing but ``setup()`` ever wrote counts only with such a
place: a table of constants is no metadata.

Two more shapes of the same mistake, found where the graph reader maps the graph's addresses:

* **Two writers.** A region the graph reads that this step's ``prepare`` wrote twice, the later statement
  overwriting what the earlier one wrote there (two plans into one workspace, the later one for another
  layer group or graph): the finding names the region and both statements (:mod:`graphsafe.diagnosis.writers`).
  Writing a buffer twice is no mistake by itself: a region whose every reader is a recorded launch that reads
  there what the same launch of an eager run of this batch reads is left alone (the experiment this stands in
  for: replay with the region holding the eager run's bytes, which changes nothing).
* **A buffer carried from replay to replay.** A buffer the graph reads before writing it that neither this
  step's ``prepare`` nor anything in the graph resets (an accumulator that is neither static nor an
  output): every replay starts from what the last one left.  Not on a step that shows frozen values (a kernel
  frozen for another batch reads workspace it did not write this time): frozen-host-value names those.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ...capture.regions import byte_region, tensor_args
from ...findings import Finding, FindingKind
from ..carried import carried_inputs
from ..context import StepContext
from ..frozen import frozen_values
from ..graph_evidence import recorded_kernel, triton_names
from ..writers import trace_writes

KIND = FindingKind.UNPERSISTED_METADATA
STAGE = "diagnosis"


def run(ctx: StepContext) -> Finding | None:
    ev = ctx.evidence
    reads = [r for r in ev.unwritten_reads if r.origin in ("earlier-prepare", "never-written")]
    moved: dict[int, list[str]] = {r.key: ev.rebound([r.key]) + ev.moved_to(r) for r in reads}
    hits = [r for r in reads if r.origin == "earlier-prepare" or moved[r.key]]
    if not hits:
        found = _overwritten(ctx) or _carried(ctx)
        if found is not None:
            return found
        ev.note(
            KIND.value,
            f"every region the graph reads held this batch's values after prepare() "
            f"({len(ev.graph_read_tensors)} buffers), or only setup() ever wrote it",
        )
        return None
    names = ", ".join(r.path for r in hits)
    first = hits[0]
    for r in hits:
        ev.claim(KIND.value, r.key, r.region)
    if first.alternate:
        how = "this step's prepare() writes it on alternate calls only (a double buffer the graph froze one copy of)"
    elif first.stale:
        how = "it did not hold what this step's prepare() writes there"
    elif first.origin == "never-written":
        how = "nothing but setup() ever wrote it"
    else:
        how = "this step's prepare() did not write it"
    msg = f"the graph reads {names} as captured, but {how}"
    went = list(dict.fromkeys(p for r in hits for p in moved[r.key]))
    if went:
        msg += f"; this step's values went elsewhere: {', '.join(went[:4])}"
    return Finding(
        kind=KIND,
        message=msg,
        where=first.path,
        details={"buffers": [r.path for r in hits], "new": went, "origin": first.origin},
        cause="buffer:" + (ctx.info.paths.get(first.key) or [first.path.split(", ")[0]])[0],
    )


def _readers(ctx: StepContext) -> dict[int, dict[int, tuple[int, set]]]:
    """storage key -> byte offset -> (where the reads from there end, the launches and graph nodes that start
    reading it there).  A recorded launch reads the region of its argument.  A graph node's pointer says only where
    its reads start: an array there is taken to end where the next array any node points at begins (a library lays
    a schedule's arrays out one after the other in its workspace), or at the end of the storage.  The node of a
    kernel a recorded launch accounts for, pointing where one of the launches' arguments starts, is that launch
    seen again in the graph: one reader, counted once."""
    out: dict[int, dict[int, tuple[int, set]]] = {}
    launched: set[tuple[int, int]] = set()

    def add(key: int, lo: int, hi: int, who: tuple) -> None:
        end, whos = out.setdefault(key, {}).get(lo, (lo, set()))
        whos.add(who)
        out[key][lo] = (max(end, hi), whos)

    for i, launch in enumerate(ctx.info.launches):
        for v in tensor_args(launch) if launch.device_work else ():
            r = byte_region(v)
            if r is not None:
                add(v.key, r[0], r[1], ("launch", i))
                launched.add((v.key, r[0]))
    gmap = ctx.info.graph_map
    if gmap is None:
        return out
    triton = triton_names(ctx.info.launches)
    nodes = {n.index: n for n in gmap.read.nodes}
    for key, ptrs in gmap.held().items():
        starts = sorted({p.at for p in ptrs})
        ends = dict(zip(starts, [*starts[1:], max(gmap.nbytes.get(key, 0), starts[-1] + 4)]))
        for p in ptrs:
            if (key, p.at) in launched and recorded_kernel(nodes[p.node], triton):
                continue
            add(key, p.at, ends[p.at], ("node", p.node))
    return out


def _fill(write, lo: int, hi: int) -> bool:
    """Did ``write`` put one repeated value into two or more words of ``[lo, hi)`` (a zero_() or fill_(), not a
    schedule), or leave two or more words there all one value?  The trace sees only the bytes a statement changed:
    a zero_() over a buffer that held this batch's values changes only the words that were not zero, one word for a
    one-request batch, and what it leaves says it was a reset.  One word alone says nothing either way (a schedule's
    one chunk size), and is no fill."""
    return _one_value(write.after[lo:hi][write.mask[lo:hi]]) or _one_value(write.after[lo:hi])


def _one_value(vals: torch.Tensor) -> bool:
    """Are the bytes ``vals`` two or more words (of 4 bytes where they divide so) of one value?"""
    if vals.numel() % 4 == 0:
        vals = vals.view(-1, 4)
    return len(vals) > 1 and bool((vals == vals[:1]).all())


def _runs(mask: torch.Tensor, lo: int) -> Iterator[tuple[int, int]]:
    """``[at, hi)`` of each run of set bytes of ``mask`` (which starts at byte ``lo``), in order."""
    pos = 0
    while True:
        rest = mask[pos:]
        if not bool(rest.any()):
            return
        at = pos + int(rest.nonzero()[0])
        tail = mask[at:]
        hi = at + (int((~tail).nonzero()[0]) if bool((~tail).any()) else tail.numel())
        yield lo + at, lo + hi
        pos = hi


def _overwritten(ctx: StepContext) -> Finding | None:
    """A region two parts of the graph read (two layer groups' kernels, say) that two statements of this step's
    prepare wrote, the later over the earlier: each part was captured to read its own writer's values there."""
    ev = ctx.evidence
    readers = _readers(ctx)
    # a region only recorded launches read, each reading there what an eager run of this batch reads at the same
    # argument, is no second writer's doing whoever wrote it twice (a prepare() that fixes up its parent's values)
    offsets = {
        k: [
            (at, end)
            for at, (end, who) in by.items()
            if len(who) > 1
            and not (all(w[0] == "launch" for w in who) and ctx.evidence.eager_reads_the_same(k, at, end))
        ]
        for k, by in readers.items()
    }
    keys = [k for k in ev.graph_read_tensors if offsets.get(k) and ev.ledger.written(k)]
    if not keys:
        return None
    target = ctx.session.target
    writes = trace_writes(
        target,
        lambda: target.prepare(ctx.padded_batch),
        {k: ev.graph_read_tensors[k] for k in keys},
    )
    for key in keys:
        mine = [w for w in writes if w.key == key]
        for lo, end in sorted(offsets[key]):
            hit = [w for w in mine if bool(w.mask[lo:end].any())]
            for i, first in enumerate(hit):
                later = next((w for w in hit[i + 1 :] if w.label != first.label), None)
                if later is None:
                    continue
                if _fill(first, lo, end) or _fill(later, lo, end):
                    continue  # a reset, not a second plan
                both = first.mask[lo:end] & later.mask[lo:end]  # where the later write lands on the earlier's
                at, hi = next(
                    ((a, b) for a, b in _runs(both, lo) if not torch.equal(first.after[a:b], later.after[a:b])),
                    (-1, -1),
                )
                if at < 0:
                    continue
                name = ev.name(key, at, hi)
                ev.claim(KIND.value, key, (at, hi))
                return Finding(
                    kind=KIND,
                    message=(
                        f"the graph reads {name}, which this step's prepare() wrote twice: {first.label} "
                        f"(`{first.source}`) wrote it, then {later.label} (`{later.source}`) overwrote it, so the "
                        "graph reads the later write's values where it captured the earlier's place (give each "
                        "writer a buffer of its own)"
                    ),
                    where=name,
                    details={"buffers": [name], "writers": [first.label, later.label], "origin": "overwritten"},
                    cause="buffer:" + (ctx.info.paths.get(key) or [name])[0],
                )
    return None


def _carried(ctx: StepContext) -> Finding | None:
    """A buffer the graph reads before writing (its outputs change with what the buffer held) that neither
    ``prepare()`` nor the graph resets, and that a replay leaves other than it found it: an accumulator.  A work
    counter whose kernel hands it back as it found it is no cause (:func:`carried_inputs`, ``accumulating``)."""
    ev, gmap = ctx.evidence, ctx.info.graph_map
    outputs = {t.untyped_storage().data_ptr() for t in ctx.graph.outputs}
    held = gmap.held() if gmap is not None else ev.graph_read_tensors
    keys = [k for k in held if k in ev.graph_read_tensors and k not in outputs and not ev.ledger.written(k)]
    keys = [k for k in keys if k in ev._replay_writes(set(keys))]
    if keys and frozen_values(ctx)[0]:
        # a graph frozen for another batch (its grid, its split count) can read workspace it did not write this
        # time: that is the frozen value's doing, and frozen-host-value names it
        return None
    carried = carried_inputs(ctx, keys, accumulating=True) if keys else []
    if not carried:
        return None
    names = [", ".join(ctx.info.paths.get(k) or [hex(k)]) for k in carried]
    return Finding(
        kind=KIND,
        message=(
            f"the graph reads and writes {', '.join(names)} and reads it before writing, but neither prepare() nor "
            "the graph resets it: every replay starts from what the one before left (an accumulator that is "
            "neither static nor an output; reset it in prepare() or inside forward())"
        ),
        where=names[0],
        details={"buffers": names, "carried": names, "origin": "carried"},
        cause="buffer:" + names[0].split(", ")[0],
    )

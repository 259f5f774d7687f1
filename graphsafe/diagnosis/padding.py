"""Padded rows: where an instance's inputs differ from a fresh ``prepare()``'s only past the live requests, and
the repair experiment for a race through them (:func:`race`): shared by the ``stale-padding`` and
``nondeterministic-replay`` probes, which never import each other."""

from __future__ import annotations

import torch

from ..capture.statewalk import storage_key, walk
from ..capture.statics import SavedStatics, static_dict
from ..findings import Finding, FindingKind, Mismatch
from .carried import carried_inputs, written_inputs
from .context import StepContext
from .evidence import Evidence
from .repair import replay_state_kept, replay_with, same_replay

__all__ = [
    "RACE_PAIRS",
    "ALIAS_RUNS",
    "race",
    "padding_alone",
    "rows_matter",
    "input_paths",
    "differing_rows",
    "padding_slots",
    "unwritten_rows",
    "unwritten_buffers",
]


def differing_rows(
    now: dict[str, torch.Tensor], fresh: dict[str, torch.Tensor], paths: set[str]
) -> dict[str, tuple[int, int]]:
    """Buffer path -> (first, last) row where a buffer of ``now`` differs from the same path's in ``fresh``
    (paths -> tensors after a prepare), for the ``paths`` given."""
    out = {}
    for path, t in now.items():
        f = fresh.get(path)
        if path not in paths or f is None or f.shape != t.shape or f.dtype != t.dtype or t.numel() == 0:
            continue
        bad = ~((t == f) | (t.isnan() & f.isnan())) if t.dtype.is_floating_point else t != f
        if bool(bad.any()):
            out[path] = _row_span(bad)
    return out


def _past_live(differing: dict[str, tuple[int, int]], num_reqs: int) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """Split buffers by where they differ (path -> (first, last) row): those only past the live requests (the
    padding), and the paths of those that differ in a live request's row as well."""
    past = {p: span for p, span in differing.items() if span[0] >= num_reqs}
    return past, [p for p in differing if p not in past]


def padding_alone(
    differing: dict[str, tuple[int, int]], num_reqs: int, recorded: set[str]
) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """Whether buffers that differ after the example's history (path -> (first, last) row) put the difference
    down to the padding alone: the buffers that differ only past the live requests, and the ones that stop
    the claim, buffers a recorded launch reads (``recorded``) that differ in a live row too.  A live-row
    difference only the graph reader shows (a library's workspace, maybe written before it is read) does not."""
    past, live = _past_live(differing, num_reqs)
    return past, [p for p in live if p in recorded]


def rows_matter(ctx: StepContext, rows: dict[str, tuple[int, int]], fresh: dict[str, torch.Tensor]) -> bool:
    """The experiment behind a claim that rows past the live requests hold stale values: from the state before this
    step's replay, does the replay come out otherwise (live rows or static state, bit for bit) once ``rows`` (path ->
    (first, last) row) of the graph instance hold ``fresh``'s values (paths -> a fresh instance's tensors after its
    ``prepare()``)?  Rows the graph never reads (the tail of a flat index array past this batch's pages, a
    workspace's unused end) change nothing.  True where it cannot tell: no state saved before the replay, none of
    the buffers one the graph reads, or a baseline replay that does not repeat itself."""
    pre = ctx.before_replay
    if pre is None:
        return True
    now = dict(walk(ctx.session.target))
    units = []
    for path, (first, last) in rows.items():
        g, f = now.get(path), fresh.get(path)
        if g is None or f is None or g.shape != f.shape or g.dtype != f.dtype or storage_key(g) not in pre.tensors:
            continue
        units.append((g[first : last + 1], f[first : last + 1]))
    if not units:
        return True
    with replay_state_kept(ctx):
        base = replay_with(ctx, pre)
        if not same_replay(base, replay_with(ctx, pre)):
            return True
        return not same_replay(base, replay_with(ctx, pre, units))


def _row_span(bad: torch.Tensor) -> tuple[int, int]:
    if bad.dim() == 0:
        return (0, 0)
    rows = bad.reshape(bad.shape[0], -1).any(dim=1).nonzero().reshape(-1)
    return (int(rows.min()), int(rows.max())) if rows.numel() else (0, 0)


def _rows(bad: torch.Tensor) -> str:
    if bad.dim() == 0:
        return ""
    first, last = _row_span(bad)
    return f"[{first}:{last + 1}]" if bool(bad.any()) else ""


def input_paths(ctx, recorded: bool = False) -> set[str]:
    """Attribute paths of buffers the graph reads and does not write itself (``recorded``: only those a recorded
    launch reads, not those only the graph reader shows, whose addresses are no proof of a read)."""
    info = ctx.info
    return {
        p
        for key, buf in ctx.graph.recording.external.items()
        if key not in info.graph_written and key not in ctx.session.static_keys and not (recorded and buf.graph_only)
        for p in info.paths.get(key, [])
    }


def unwritten_rows(ctx, fresh) -> dict[str, tuple[int, int]]:
    """Input buffers that prepare left (partly) unwritten, by the rows where the NaN poison survives."""
    inputs = input_paths(ctx)
    return {
        path: _row_span(t.isnan())
        for path, t in fresh.buffers_after_prepare.items()
        if path in inputs and t.dtype.is_floating_point and bool(t.isnan().any())
    }


def unwritten_buffers(ctx, fresh, past: int = 0) -> list[str]:
    """Input buffers that prepare left (partly) unwritten from row ``past`` on, named with the rows
    (``self.lens[1:2]``)."""
    rows = unwritten_rows(ctx, fresh)
    return [f"{path}[{first}:{last + 1}]" for path, (first, last) in rows.items() if first >= past]


def padding_slots(padded) -> str:
    """What is padding in ``padded`` (the batch as the graph ran it), in words."""
    if padded.is_padded:
        return f"slots {padded.num_reqs}..{padded.num_slots - 1} and token rows past {padded.num_tokens}"
    return f"token rows past this batch's {padded.num_tokens} tokens"


#: fresh-padding replay pairs that must all agree before a race is put down to the padding (a race can
#: happen to land alike twice)
RACE_PAIRS = 3


def race(ctx: StepContext, before: SavedStatics, mism: list[Mismatch]) -> tuple[Finding | None, str]:
    """Two replays of this step's prepared batch differed (``mism``; ``before`` holds the static state the
    first one started from).  A stale-padding finding when some inputs of the graph instance (those recorded
    launches read) differ from what a fresh instance's ``prepare()`` writes for this batch only past the live
    requests (:attr:`~graphsafe.diagnosis.evidence.Evidence.fresh_scratch`: the step without the instance's history),
    and the replays agree, :data:`RACE_PAIRS` times over, once those rows hold the fresh values.  Only
    those rows change, so the test holds whatever else differs.  With it, or with None, what was seen in words
    (for the finding that reports the race otherwise).  The instance's inputs and static state are given back as
    they were."""
    g, padded = ctx.session.target, ctx.padded[-1]
    if ctx.evidence is None:  # at the step stage: the diagnosis' evidence, made early (a rare path: replays differ)
        ctx.evidence = Evidence(ctx)
    fresh = ctx.evidence.fresh_scratch.buffers_after_prepare  # this step's prepare() without the instance's history
    now = dict(walk(g))
    # only buffers a recorded launch reads: a library's workspace is not rewritten with another instance's bytes
    stale, _ = _past_live(differing_rows(now, fresh, input_paths(ctx, recorded=True)), padded.num_reqs)
    if not stale:
        why = "no input a recorded launch reads differs from a fresh prepare() only past the live requests"
        return _aliased(ctx, mism, why)
    names = [f"{path}[{first}:{last + 1}]" for path, (first, last) in stale.items()]
    kept = {path: now[path].clone() for path in stale}
    after = SavedStatics(static_dict(g), ctx.seed, ctx.region, ctx.comparator.paged)
    try:
        for path in stale:
            now[path].copy_(fresh[path])
        for _ in range(RACE_PAIRS):
            before.restore()
            if ctx.replay_twice(before)[1]:  # they race with fresh padding too: another cause, or padding that aliases
                return _aliased(ctx, mism, f"the replays still differ with fresh values in {', '.join(names[:4])}")
    finally:
        for path in stale:
            now[path].copy_(kept[path])
        after.restore()
        ctx.engine.synchronize()
    m = mism[0]
    finding = Finding(
        kind=FindingKind.STALE_PADDING,
        message=(
            f"two replays of one prepared batch differ in {m.tensor} ({m.count}/{m.total}, max abs {m.max_abs:.3g}), "
            f"and agree once {', '.join(names[:4])} hold what prepare() writes there on a fresh instance: the padding "
            f"({padding_slots(padded)}) keeps an earlier batch's values, and the graph's work through them races with the live rows' "
            "(two writes to one place in one launch: which lands is undefined)"
        ),
        where=names[0].split("[")[0],
        details={"stale_buffers": names, "race": True},
        mismatches=mism,
        cause=f"buffer:{names[0].split('[')[0]}",
    )
    return finding, ""


#: eager runs of the step, unpadded and padded, on fresh instances, before a race is put down to padding that aliases
#: live rows: the unpadded ones must all agree bit for bit (a race between live rows shows in some of them)
ALIAS_RUNS = 8


def _aliased(ctx: StepContext, mism: list[Mismatch], why: str) -> tuple[Finding | None, str]:
    """The control for a race no fresh value removes: the same step run eagerly on fresh instances without history,
    :data:`ALIAS_RUNS` times unpadded and up to as many times padded.  When the unpadded runs all agree bit for bit
    and a padded run differs from them in live rows, the padding itself makes the race (padded rows aimed at live
    rows' places whatever came before: fresh padding aliases alike), and the finding is stale-padding; else
    ``(None, why)`` with what was seen.  A target whose rows past the live ones alias live rows in its unpadded runs
    too races there as well: no claim (``RacyCacheSharedSlot``).  Not asked where a buffer the graph writes carries
    one replay into the next (:func:`~graphsafe.diagnosis.carried.carried_inputs`): that, not a race, makes them
    differ."""
    ev = ctx.evidence
    if ev is None:
        return None, why
    if carried_inputs(ctx, written_inputs(ctx)):  # (remembered per graph: the probes ask the same)
        return None, why + "; a buffer the graph writes carries one replay into the next"
    first = ev.fresh_unpadded_scratch.live
    for _ in range(ALIAS_RUNS - 1):
        if ctx.comparator.outputs(first, ev.fresh_run(padded=False).live, ctx.batch, bitwise=True):
            return None, why + "; the step run unpadded on fresh instances races too: not the padding"
    runs = (ev.fresh_scratch if i == 0 else ev.fresh_run(padded=True) for i in range(ALIAS_RUNS))
    differs = next((d for d in (ctx.comparator.outputs(r.live, first, ctx.batch) for r in runs) if d), None)
    if differs is None:
        return None, why + "; the step run padded on fresh instances gives what it gives unpadded"
    padded = ctx.padded[-1]
    m, d = mism[0], differs[0]
    finding = Finding(
        kind=FindingKind.STALE_PADDING,
        message=(
            f"two replays of one prepared batch differ in {m.tensor} ({m.count}/{m.total}, max abs {m.max_abs:.3g}), "
            f"and fresh values in the padded rows do not stop it; run eagerly on fresh instances, the step gives one "
            f"answer every time unpadded ({ALIAS_RUNS} runs) and another padded ({d.tensor}: {d.count}/{d.total} "
            f"differ): the padding ({padding_slots(padded)}) aims at live rows' places whatever came before, and "
            "the graph's writes through it race with the live rows' (point padded rows at a slot no request owns)"
        ),
        where=m.tensor,
        details={"stale_buffers": [], "race": True, "aliased": True},
        mismatches=mism,
        cause=f"output:{m.tensor}",
    )
    return finding, ""

"""The repair experiment: which buffer, given the value a fresh eager instance holds, makes the replay right?

When a step's replay differs from eager, diagnosis does not guess the cause from a buffer's history alone.  It
takes the buffers the graph reads (the recorded launches' and, on CUDA, the graph reader's), sets them back to
what they held before the step's replay (:class:`PreReplay`, saved by the step loop of a run that diagnoses), and
copies into them, one buffer or group at a time, fresh values (:data:`SOURCES`, in order): what a fresh instance
with the same history (the captures' and the example's steps run eagerly, padded as the graph ran them) holds at
the same attribute path after this step's ``prepare()``; what the same launches of that eager run read at the same
argument (after its ``prepare()``, then as its ``forward()`` left it: a plan eager writes inside ``forward()``);
what an instance without history holds (this step only).  The smallest set of buffers whose repair makes the
replay equal eager is the cause.

What the experiment proves is used three times:

* a probe that names a buffer (``buffer:`` causes of ``lazy-init`` and ``unpersisted-metadata``) when a repair of
  *other* buffers fixes the replay names the wrong one: its claim is set aside, with the repair as the reason;
* a difference no probe explains, fixed by a repair, is named from the repaired buffer's history
  (:func:`attributed`) instead of a ``replay-mismatch``;
* when no repair fixes the replay, a probe's claimed buffer whose fresh values change nothing in it
  (:func:`inert`) is no cause either: its claim is set aside; and where the replay does not repeat itself, the race
  experiment decides instead (:class:`Claim` says where two replays differed).

What it cannot do: put a value back into memory no attribute path reaches any more (a rebound buffer's old
storage: ``stale-pointer`` and ``unpersisted-metadata`` name those), repair a value the graph froze (a scalar, a
grid, a branch: the frozen-value diff names those), or repair state that the replay itself corrupts (padded
slots writing into live state: the padding probes name those).
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..capture.compare import compare_many
from ..capture.ledger import storages_of
from ..capture.regions import byte_region
from ..capture.statewalk import alike_bytes, byte_view, paths_by_storage, same_bits, storage_key, walk
from ..capture.statics import SavedStatics, static_dict
from ..engines.recording import TensorArg
from ..findings import Finding, FindingKind, Mismatch
from .context import StepContext
from .evidence import ScratchRun, warmup_wrote_last
from .writers import trace_writes

__all__ = [
    "PreReplay",
    "Repair",
    "Claim",
    "repair",
    "attributed",
    "inert",
    "replay_with",
    "same_replay",
    "replay_state_kept",
]

#: at most this many buffers are tried one by one; past it only the whole set (then nothing is named)
MAX_SINGLE = 24


class PreReplay:
    """The graph instance's buffers the graph reads (static state included) as they were before a replay, to set
    them back for an experiment and to give the replay's own state back afterwards."""

    def __init__(self, ctx: StepContext):
        g, ext = ctx.session.target, ctx.graph.recording.external
        self.tensors = {k: t for k, t in storages_of(g, exclude=ctx.session.static_keys).items() if k in ext}
        self.bytes = {k: byte_view(t).clone() for k, t in self.tensors.items()}
        self.statics = SavedStatics(static_dict(g), ctx.seed, ctx.region, ctx.comparator.paged)

    def restore(self) -> None:
        for k, t in self.tensors.items():
            byte_view(t).copy_(self.bytes[k])
        self.statics.restore()


@contextlib.contextmanager
def replay_state_kept(ctx: StepContext) -> Iterator[None]:
    """Around an experiment that replays this step from the state before its replay: the graph instance's buffers
    and static state are given back afterwards as the step's own replay left them."""
    after = PreReplay(ctx)
    try:
        yield
    finally:
        after.restore()
        ctx.engine.synchronize()


Replayed = tuple[list[torch.Tensor], dict[str, torch.Tensor]]  # a replay's live rows and static state (copies)


def replay_with(
    ctx: StepContext, pre: PreReplay, units: Sequence[tuple[torch.Tensor, torch.Tensor]] = (), *, copies: bool = True
) -> Replayed:
    """Replay this step from the state before its replay (``pre``), each view of ``units`` holding the given values
    first: the live rows and the static state it leaves (copies; ``copies=False``: the static tensors themselves,
    for a caller that reads them before anything else runs)."""
    pre.restore()
    for dst, src in units:
        dst.copy_(src)
    live = ctx.replay_live()
    static = static_dict(ctx.session.target)
    return live, ({n: t.clone() for n, t in static.items()} if copies else static)


def same_replay(x: Replayed, y: Replayed) -> bool:
    """Did two replays give the same live rows and static state, bit for bit?"""
    return all(same_bits(a, b) for a, b in zip(x[0], y[0])) and all(same_bits(x[1][n], y[1][n]) for n in x[1])


@dataclass
class Claim:
    """The claim experiment's outcome (:func:`inert`): ``inert`` when the claimed buffer changes nothing in the
    replay; ``race``, where the baseline replay did not repeat itself, where its two runs differed."""

    inert: bool
    race: list[Mismatch] = field(default_factory=list)


def inert(ctx: StepContext, keys: set[int], regions: list[tuple[int, int, int]] | None = None) -> Claim:
    """Does a probe's claimed buffer (storages ``keys``) leave the replay as it is, whatever fresh value it holds?

    The claim experiment, for a difference no repair fixes: the graph replays from the state before this step's
    replay with nothing repaired (the baseline), then with each source's fresh value in the claimed buffers alone
    (:data:`SOURCES`); the claim is inert when every such replay gives the baseline's live rows and static state bit
    for bit.  Where the probe named the bytes it says the graph read wrong (``regions``: storage key, first byte,
    end byte), only a source whose fresh value differs in those bytes tests the claim: one that differs elsewhere in
    the buffer (words a plan writes differently call to call, rows no request uses) leaves the claim untested; so
    does a NaN where the graph instance holds NaN (:func:`alike_bytes`: a poisoned buffer an eager run added to
    holds the GPU's canonical NaN, not the poison's bits, and is as unwritten as before).  Not
    inert (the claim stands) when no source tests it (no experiment to run: a workspace every instance shares by
    design holds the same bytes in all of them, a plan every fresh ``prepare()`` overwrites alike), or when a claimed
    storage is not one the replay reads through an attribute path (a rebound buffer's old storage: no repair can reach
    it).  When the baseline replay does not repeat itself, ``race`` says where its two runs differed: the replays race
    at this step, and the race experiment decides instead."""
    pre: PreReplay | None = ctx.before_replay
    if pre is None or ctx.evidence is None or not keys or not keys <= set(pre.tensors):
        return Claim(False)
    named = [(k, lo, hi) for k, lo, hi in regions or () if k in keys] or [(k, 0, pre.bytes[k].numel()) for k in keys]

    def claimed(units: Units | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [u for k in keys for u in (units or {}).get(k, [])]

    def tests_claim(units: Units) -> bool:
        """Does this source's fresh value change a byte the claim names (any byte of the buffer, where it names
        none)?  A NaN where the graph instance holds NaN changes nothing: both say nobody wrote it."""
        if not keys & set(units):
            return False
        pre.restore()
        for dst, src in claimed(units):
            dst.copy_(src)
        return any(
            not alike_bytes(byte_view(pre.tensors[k])[lo:hi], pre.bytes[k][lo:hi], pre.tensors[k].dtype)
            for k, lo, hi in named
        )

    def replay(units: Units | None = None) -> Replayed:
        return replay_with(ctx, pre, claimed(units))

    with replay_state_kept(ctx):
        tried = [units for units in _fresh_values(ctx, pre).values() if tests_claim(units)]
        if not tried:  # every fresh instance holds the same there: no experiment (a buffer shared by design is so
            return Claim(False)  # in every instance, and a probe may still prove it the cause, as two writers of a plan
        base, again = replay(), replay()
        if not same_replay(base, again):  # the replay does not repeat itself: nothing to compare against
            race = ctx.comparator.outputs(base[0], again[0], ctx.batch, bitwise=True) or compare_many(
                [(f"static[{n!r}]", base[1][n], again[1][n], None) for n in base[1]], bitwise=True
            )
            return Claim(False, race)
        return Claim(all(same_replay(base, replay(units)) for units in tried))


@dataclass
class Repair:
    """The experiment's outcome: ``keys`` (storages) whose fresh values made the replay equal eager, from which
    source (:data:`SOURCES`), and how many replays it took."""

    fixed: bool
    keys: tuple[int, ...] = ()
    names: tuple[str, ...] = ()
    source: str = ""  # which of SOURCES gave the values that fixed it
    replays: int = 0
    tried: int = 0  # buffers whose fresh value differed from the replayed one
    #: the rows of the repaired buffer past the live requests (or tokens), given a fresh prepare()'s values alone,
    #: also make the replay right: the padding is the cause
    padding: bool = False
    #: every buffer whose replayed value differs from some source's fresh value (a buffer outside it held what
    #: every fresh instance holds: no repair of it can change the replay)
    differing: frozenset[int] = frozenset()


Units = dict[int, list[tuple[torch.Tensor, torch.Tensor]]]  # storage key -> (graph instance's view, fresh value)


def _by_path(ctx: StepContext, run: ScratchRun, pre: PreReplay) -> Units:
    """storage key -> (the graph instance's view, the fresh instance's value) at every path both hold alike, for
    the buffers the graph reads whose fresh value differs from what the replay read (``pre`` restored)."""
    now = dict(walk(ctx.session.target))
    out: Units = {}
    for path, fresh in run.buffers_after_prepare.items():
        g = now.get(path)
        if g is None or g.shape != fresh.shape or g.dtype != fresh.dtype or g.device != fresh.device:
            continue
        key = storage_key(g)
        if key in pre.tensors and not same_bits(g, fresh):
            out.setdefault(key, []).append((g, fresh))
    return out


def _by_read(ctx: StepContext, run: ScratchRun, pre: PreReplay, fresh: dict[int, torch.Tensor]) -> Units:
    """storage key -> (the bytes a recorded launch of the graph reads, the bytes the same launch of the fresh run
    reads at the same argument), where they differ: what eager reads there, wherever it keeps it (the other copy of
    a double buffer, another wrapper's buffer, a plan its forward() wrote).  ``fresh``: the run's storages' bytes
    after its prepare() or after its forward()."""
    graph = [la for la in ctx.info.launches if la.device_work]
    eager = [lb for lb in run.launches if lb.device_work]
    sm = difflib.SequenceMatcher(
        a=[(x.kind, x.name) for x in graph], b=[(x.kind, x.name) for x in eager], autojunk=False
    )
    out: Units = {}
    seen: set[tuple[int, int, int]] = set()
    for i, j, n in sm.get_matching_blocks():
        for la, lb in zip(graph[i : i + n], eager[j : j + n]):
            for name, v in la.args.items():
                w = lb.args.get(name)
                if not (isinstance(v, TensorArg) and isinstance(w, TensorArg) and v.key in pre.tensors):
                    continue
                rv, rw, src = byte_region(v), byte_region(w), fresh.get(w.key)
                if rv is None or rw is None or src is None or rv[1] - rv[0] != rw[1] - rw[0] or rw[1] > src.numel():
                    continue
                if (v.key, *rv) in seen:
                    continue
                seen.add((v.key, *rv))
                dst = byte_view(pre.tensors[v.key])[rv[0] : rv[1]]
                if dst.numel() == rw[1] - rw[0] and not torch.equal(dst, src[rw[0] : rw[1]]):
                    out.setdefault(v.key, []).append((dst, src[rw[0] : rw[1]]))
    return out


#: where fresh values come from, in the order tried: the same paths of a fresh instance with the example's history;
#: what the same launches of that instance read (after its prepare(), then after its forward(): a plan eager writes
#: inside forward()); the same paths of an instance without history (this step only)
SOURCES = ("history", "read", "read-forward", "no-history")


def _fresh_values(ctx: StepContext, pre: PreReplay) -> dict[str, Units]:
    """Each source's fresh values (:data:`SOURCES`) for the buffers the graph reads, where they differ from what the
    replay read (``pre`` restored first)."""
    ev = ctx.evidence
    pre.restore()
    return {
        "history": _by_path(ctx, ev.scratch, pre),
        "read": _by_read(ctx, ev.scratch, pre, ev.scratch.bytes_after_prepare),
        "read-forward": _by_read(ctx, ev.scratch, pre, ev.scratch.bytes_after_forward),
        "no-history": _by_path(ctx, ev.fresh_scratch, pre),
    }


def repair(ctx: StepContext) -> Repair:
    """Run the experiment (module docstring) on a step whose replay differed; the graph instance's state is given
    back as the replay left it.  Needs the step's :class:`PreReplay` (``ctx.before_replay``)."""
    pre: PreReplay | None = ctx.before_replay
    if pre is None:
        return Repair(False)
    replays = tried = 0

    def trial(units: Units, keys: list[int]) -> bool:
        nonlocal replays
        replays += 1
        live, static = replay_with(ctx, pre, [u for k in keys for u in units[k]], copies=False)
        return not ctx.comparator.step(live, ctx.eager_live, static, ctx.eager_static, ctx.batch, ctx.region)

    with replay_state_kept(ctx):
        every = _fresh_values(ctx, pre)
        differing = frozenset(k for units in every.values() for k in units)
        for source in SOURCES:
            units = every[source]
            keys = sorted(units)
            tried = max(tried, len(keys))
            if not keys or not trial(units, keys):
                continue
            found = next((k for k in keys[:MAX_SINGLE] if trial(units, [k])), None)
            if found is not None:
                keys = [found]
            elif len(keys) <= MAX_SINGLE:
                for k in list(keys):  # the smallest set: drop each buffer that the others fix without
                    if len(keys) > 1 and trial(units, [x for x in keys if x != k]):
                        keys.remove(k)
            names = tuple(_name(ctx, k) for k in keys)
            padding = _past_live(ctx, pre, keys[0], trial)
            return Repair(True, tuple(keys), names, source, replays, len(units), padding, differing)
        return Repair(False, replays=replays, tried=tried, differing=differing)


def _past_live(ctx: StepContext, pre: PreReplay, key: int, trial) -> bool:
    """The padding experiment: does the replay come out right when only the rows of ``key`` past this batch's live
    tokens (or requests) hold what a fresh instance without history writes there?"""
    pre.restore()
    units = _by_path(ctx, ctx.evidence.fresh_scratch, pre).get(key, [])
    for live in sorted({ctx.batch.num_tokens, ctx.batch.num_reqs}, reverse=True):
        past = {key: [(g[live:], f[live:]) for g, f in units if g.dim() and g.shape[0] > live]}
        if past[key] and trial(past, [key]):
            return True
    return False


def _name(ctx: StepContext, key: int) -> str:
    paths = paths_by_storage(ctx.session.target).get(key) or ctx.info.paths.get(key) or [hex(key)]
    return ", ".join(paths)


_FROM = {
    "history": "a fresh instance with the same history holds after this step's prepare()",
    "read": "the same launches of an eager run with the same history read (after its prepare())",
    "read-forward": "the same launches of an eager run with the same history read (written in its forward())",
    "no-history": "a fresh instance without history holds after this step's prepare()",
}


def attributed(ctx: StepContext, rep: Repair) -> Finding:
    """The finding a repair names: the repaired buffer's kind from its history (written last by a warm-up:
    ``lazy-init``; differing from a fresh prepare() without history only past the live requests:
    ``stale-padding``; else this step's prepare() did not leave this batch's values where the graph reads them:
    ``unpersisted-metadata``), the buffer and its writers."""
    key, name = rep.keys[0], rep.names[0]
    nbytes = ctx.graph.recording.external[key].nbytes
    infos = list(ctx.session.infos.values())
    live = ctx.padded_batch.num_slots
    writers = _writers(ctx, key)
    m = ctx.mismatches[0]
    proof = (
        f"{m.tensor} differs from eager ({m.count}/{m.total}, max abs {m.max_abs:.3g}); given what {_FROM[rep.source]}, "
        f"{', '.join(rep.names)} make{'s' if len(rep.keys) == 1 else ''} the replay equal eager ({rep.replays} replays)"
    )
    kind = FindingKind.UNPERSISTED_METADATA
    if warmup_wrote_last(infos, key, 0, nbytes):
        kind, how = FindingKind.LAZY_INIT, "a warm-up wrote it last: capture skipped its writer"
    elif rep.padding and live > ctx.batch.num_reqs:
        kind = FindingKind.STALE_PADDING
        how = (
            f"its rows past this batch's live requests ({ctx.batch.num_reqs} of {live} slots) alone, given what a "
            "fresh prepare() writes there, make the replay right: the padding keeps stale values"
        )
    elif rep.source == "read-forward":
        how = "eager writes what it reads there inside forward(), and the graph replays without that write"
    else:
        how = "this step's prepare() did not leave this batch's values where the graph reads them"
    msg = f"{proof}: the graph reads {name}, and {how}"
    if writers:
        msg += f"; its writers in prepare(): {'; '.join(writers[:3])}"
    return Finding(
        kind=kind,
        message=msg,
        where=name.split(", ")[0],
        mismatches=ctx.mismatches,
        details={"repaired": list(rep.names), "writers": writers, "source": rep.source, "replays": rep.replays},
        cause="buffer:" + name.split(", ")[0],
    )


def _writers(ctx: StepContext, key: int) -> list[str]:
    """The statements of this step's prepare() that write the storage at ``key`` (file:line and text)."""
    target: Any = ctx.session.target
    t = ctx.evidence.graph_read_tensors.get(key)
    if t is None:
        return []
    view = byte_view(t)
    kept = view.clone()
    view.fill_(0xA5)  # a write of the value the buffer already held shows too
    try:
        writes = trace_writes(target, lambda: target.prepare(ctx.padded_batch), {key: t})
    finally:
        view.copy_(kept)
    return list(dict.fromkeys(f"{w.label} `{w.source}`" for w in writes if w.key == key))

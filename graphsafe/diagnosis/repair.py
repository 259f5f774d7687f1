"""The repair experiment: which buffer, given the value a fresh eager instance holds, makes the replay right?

When a step's replay differs from eager, diagnosis does not guess the cause from a buffer's history alone.  It
takes the buffers the graph reads (the recorded launches' and, on CUDA, the graph reader's), sets them back to
what they held before the step's replay (:class:`PreReplay`, saved by the step loop of a run that diagnoses), and
copies into them, one buffer or group at a time, what a fresh instance of the target holds at the same attribute
path after this step's ``prepare()``.  The fresh instance comes with the same history (the captures' and the
example's steps run eagerly, padded as the graph ran them) and, failing that, without it (only this step, on a
new instance).  The smallest set of buffers whose repair makes the replay equal eager is the cause.

What the experiment proves is used twice:

* a probe that names a buffer (``buffer:`` causes of ``lazy-init`` and ``unpersisted-metadata``) when a repair of
  *other* buffers fixes the replay names the wrong one: its claim is set aside, with the repair as the reason;
* a difference no probe explains, fixed by a repair, is named from the repaired buffer's history
  (:func:`attributed`) instead of a ``replay-mismatch``.

What it cannot do: put a value back into memory no attribute path reaches any more (a rebound buffer's old
storage: ``stale-pointer`` and ``unpersisted-metadata`` name those), repair a value the graph froze (a scalar, a
grid, a branch: the frozen-value diff names those), or repair state that the replay itself corrupts (padded
slots writing into live state: the padding probes name those).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..capture.ledger import storages_of
from ..capture.statewalk import byte_view, paths_by_storage, storage_key, walk
from ..capture.statics import SavedStatics, static_dict
from ..findings import Finding, FindingKind
from .context import StepContext
from .evidence import ScratchRun, warmup_wrote_last
from .writers import trace_writes

__all__ = ["PreReplay", "Repair", "repair", "attributed"]

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


@dataclass
class Repair:
    """The experiment's outcome: ``keys`` (storages) whose fresh values made the replay equal eager, from which
    fresh run (``history``: the instance's history replayed; else only this step), and how many replays it took."""

    fixed: bool
    keys: tuple[int, ...] = ()
    names: tuple[str, ...] = ()
    history: bool = True
    replays: int = 0
    tried: int = 0  # buffers whose fresh value differed from the replayed one
    rows: dict[int, tuple[int, int]] = field(default_factory=dict)  # key -> (first, last) differing row (dim 0)


def _pairs(ctx: StepContext, run: ScratchRun, pre: PreReplay) -> dict[int, list[tuple[torch.Tensor, torch.Tensor]]]:
    """storage key -> (the graph instance's view, the fresh instance's value) at every path both hold alike, for
    the buffers the graph reads whose fresh value differs from what the replay read (``pre`` restored)."""
    now = dict(walk(ctx.session.target))
    out: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for path, fresh in run.buffers_after_prepare.items():
        g = now.get(path)
        if g is None or g.shape != fresh.shape or g.dtype != fresh.dtype or g.device != fresh.device:
            continue
        key = storage_key(g)
        if key in pre.tensors and not torch.equal(g, fresh):
            out.setdefault(key, []).append((g, fresh))
    return out


def _rows(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[int, int]:
    """(first, last) row along dim 0 where a buffer's views differ from the fresh values."""
    first, last = 1 << 30, -1
    for g, fresh in pairs:
        if g.dim() == 0:
            return 0, 0
        bad = (g != fresh).reshape(g.shape[0], -1).any(dim=1).nonzero().reshape(-1)
        if bad.numel():
            first, last = min(first, int(bad[0])), max(last, int(bad[-1]))
    return first, last


def repair(ctx: StepContext) -> Repair:
    """Run the experiment (module docstring) on a step whose replay differed; the graph instance's state is given
    back as the replay left it.  Needs the step's :class:`PreReplay` (``ctx.before_replay``)."""
    pre: PreReplay | None = ctx.before_replay
    if pre is None:
        return Repair(False)
    after = PreReplay(ctx)
    replays = 0

    def trial(pairs: dict[int, list], keys: list[int]) -> bool:
        nonlocal replays
        pre.restore()
        for k in keys:
            for g, fresh in pairs[k]:
                g.copy_(fresh)
        replays += 1
        live = ctx.replay_live()
        static = static_dict(ctx.session.target)
        return not ctx.comparator.step(live, ctx.eager_live, static, ctx.eager_static, ctx.batch, ctx.region)

    try:
        for history in (True, False):
            pre.restore()
            run = ctx.evidence.scratch if history else ctx.evidence.fresh_scratch
            pairs = _pairs(ctx, run, pre)
            rows = {k: _rows(v) for k, v in pairs.items()}  # (pre restored: what the replay read)
            keys = sorted(pairs)
            if not keys or not trial(pairs, keys):
                continue
            found = next((k for k in keys[:MAX_SINGLE] if trial(pairs, [k])), None)
            if found is not None:
                keys = [found]
            elif len(keys) <= MAX_SINGLE:
                for k in list(keys):  # the smallest set: drop each buffer that the others fix without
                    if len(keys) > 1 and trial(pairs, [x for x in keys if x != k]):
                        keys.remove(k)
            names = tuple(_name(ctx, k) for k in keys)
            return Repair(True, tuple(keys), names, history, replays, len(pairs), {k: rows[k] for k in keys})
        return Repair(False, replays=replays)
    finally:
        after.restore()
        ctx.engine.synchronize()


def _name(ctx: StepContext, key: int) -> str:
    paths = paths_by_storage(ctx.session.target).get(key) or ctx.info.paths.get(key) or [hex(key)]
    return ", ".join(paths)


def attributed(ctx: StepContext, rep: Repair) -> Finding:
    """The finding a repair names: the repaired buffer's kind from its history (written last by a warm-up:
    ``lazy-init``; differing from a fresh prepare() without history only past the live requests:
    ``stale-padding``; else this step's prepare() did not leave this batch's values where the graph reads them:
    ``unpersisted-metadata``), the buffer and its writers."""
    key, name = rep.keys[0], rep.names[0]
    first, last = rep.rows.get(key, (0, 0))
    nbytes = ctx.graph.recording.external[key].nbytes
    infos = list(ctx.session.infos.values())
    live = ctx.padded_batch.num_reqs if ctx.padded_batch is not None else 0
    writers = _writers(ctx, key)
    m = ctx.mismatches[0]
    proof = (
        f"{m.tensor} differs from eager ({m.count}/{m.total}, max abs {m.max_abs:.3g}); given what a fresh instance "
        f"{'with the same history' if rep.history else 'without history'} holds after this step's prepare(), "
        f"{', '.join(rep.names)} make{'s' if len(rep.keys) == 1 else ''} the replay equal eager "
        f"({rep.replays} replays)"
    )
    kind = FindingKind.UNPERSISTED_METADATA
    if warmup_wrote_last(infos, key, 0, nbytes):
        kind, how = FindingKind.LAZY_INIT, "a warm-up wrote it last: capture skipped its writer"
    elif not rep.history and first >= ctx.batch.num_reqs and live > ctx.batch.num_reqs:
        kind = FindingKind.STALE_PADDING
        how = f"it differs only in rows {first}..{last}, past this batch's {ctx.batch.num_reqs} live requests"
    else:
        how = "this step's prepare() did not leave this batch's values there"
    msg = f"{proof}: the graph reads {name}, and {how}"
    if writers:
        msg += f"; its writers in prepare(): {'; '.join(writers[:3])}"
    return Finding(
        kind=kind,
        message=msg,
        where=name.split(", ")[0],
        mismatches=ctx.mismatches,
        details={"repaired": list(rep.names), "writers": writers, "history": rep.history, "replays": rep.replays},
        cause="buffer:" + name.split(", ")[0],
    )


def _writers(ctx: StepContext, key: int) -> list[str]:
    """The statements of this step's prepare() that write the storage at ``key`` (file:line and text)."""
    target: Any = ctx.session.target
    t = ctx.evidence.graph_read_tensors.get(key)
    if t is None:
        return []
    writes = trace_writes(target, lambda: target.prepare(ctx.padded_batch), {key: t})
    return list(dict.fromkeys(f"{w.label} `{w.source}`" for w in writes if w.key == key))

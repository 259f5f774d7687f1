"""Why a step's replay differed from eager: the diagnosis probes, in order, and the heatmap for reports."""

from __future__ import annotations

import re

import torch

from ..capture.statewalk import paths_by_storage
from ..findings import KINDS, Finding, FindingKind, Mismatch
from . import at_stage
from .context import StepContext
from .evidence import Evidence
from .frozen import diff_launches, frozen_by_recapture
from .padding import RACE_PAIRS, race
from .repair import Repair, attributed, inert, repair, replay_state_kept

__all__ = ["diagnose", "heatmap", "ruled_out"]


def diagnose(ctx: StepContext) -> tuple[Finding, str]:
    """``(finding, probe name)`` for a step with mismatches: the first diagnosis probe that explains
    them, else a ``replay-mismatch`` (probe name '')."""
    # the eager reference's live rows as compared: diagnosis re-runs the target, and an output buffer the
    # instances share (a module-level one) would otherwise show those runs' values
    ctx.eager_live = [t.clone() for t in ctx.eager_live]
    ctx.evidence = Evidence(ctx)
    heat = heatmap(ctx)
    experiment: list[Repair] = []  # the repair experiment, run once when first needed
    aside: list[str] = []  # buffer claims set aside on a step whose replays race
    # two replays of this step that differ make every claim read off one replay unsafe: the race experiment first
    # (the nondeterministic-replay probe runs it on each example's first step only)
    raced, racing = _race(ctx)
    if raced is not None:  # they agree once the padded rows hold fresh values, or the padding aliases live rows
        raced.heatmap = heat
        return raced, raced.kind.value

    def repaired() -> Repair:
        if not experiment:  # a repair is judged by one replay: on replays that race, it proves nothing
            experiment.append(repair(ctx) if racing is None else Repair(False))
        return experiment[0]

    for probe in at_stage("diagnosis"):
        f = probe.run(ctx)
        if f is None:
            continue
        if f.kind in _BUFFER_CLAIMS and f.cause.startswith("buffer:"):
            if racing is not None:  # the race experiment saw this step's replays differ, not through the padding
                ctx.evidence.note(probe.name, _READ_OFF_A_RACE.format(f.where))
                aside.append(f"{f.kind.value} {f.where}")
                continue
            rep = repaired()
            claimed = _claimed(ctx, f.cause[len("buffer:") :])
            if rep.fixed and claimed and not claimed & rep.differing:
                ctx.evidence.note(
                    probe.name,
                    f"named {f.where}, but it held what every fresh instance holds there, and the replay equals "
                    f"eager once {', '.join(rep.names)} hold a fresh instance's values",
                )
                continue
            claim = inert(ctx, claimed, ctx.evidence.claimed.get(probe.name)) if not rep.fixed else None
            if claim is not None and claim.race:  # the replays race here after all: the race experiment decides
                raced, _ = _race(ctx, claim.race)
                if raced is not None:
                    raced.heatmap = heat
                    return raced, raced.kind.value
                ctx.evidence.note(probe.name, _READ_OFF_A_RACE.format(f.where))
                continue
            if claim is not None and claim.inert:
                ctx.evidence.note(
                    probe.name,
                    f"named {f.where}, but the replay comes out the same bit for bit with a fresh instance's values "
                    "there",
                )
                continue
        if not f.mismatches:
            f.mismatches = ctx.mismatches
        f.heatmap = heat
        return f, probe.name
    rep = repaired()
    if rep.fixed:  # no probe explains it, but a repaired buffer does: named from that buffer's history
        f = attributed(ctx, rep)
        f.heatmap = heat
        return f, f.kind.value
    frozen = frozen_by_recapture(ctx)  # no repair helps, but this batch's own graph replays right: what it froze
    if frozen is not None:
        frozen.heatmap = heat
        return frozen, frozen.kind.value
    m = ctx.mismatches[0]
    if racing is not None:  # nothing names a cause, and the replays of this step differ from each other
        r = racing[0][0]
        f = Finding(
            kind=FindingKind.NONDETERMINISTIC_REPLAY,
            message=(
                f"{m.tensor} differs from eager ({m.count}/{m.total}, max abs {m.max_abs:.3g}), and two replays of "
                f"this step's prepared batch differ from each other in {r.tensor} ({r.count}/{r.total}); no probe "
                "names a cause an experiment can confirm, and a repair cannot be judged on replays that race"
                + (f" (set aside: {', '.join(aside)}, read off one replay)" if aside else "")
                + f"; not stale padding: {racing[1]}"
            ),
            where=m.tensor,
            mismatches=ctx.mismatches,
            heatmap=heat,
            cause=f"output:{m.tensor}",
            details={"padding": racing[1], "set_aside": aside},
        )
        return f, FindingKind.NONDETERMINISTIC_REPLAY.value
    looked = ruled_out(ctx)
    if rep.tried:
        looked.append(
            f"repair: the replay still differs with every one of the {rep.tried} buffers the graph reads that differ "
            f"from a fresh instance's holding the fresh values ({rep.replays} replays)"
        )
    elif ctx.before_replay is not None:
        looked.append("repair: every buffer the graph reads held what a fresh eager instance holds there")
    f = Finding(
        kind=FindingKind.REPLAY_MISMATCH,
        message=(
            f"{m.tensor} differs from eager ({m.count}/{m.total}, max abs {m.max_abs:.3g}) and no probe explains "
            f"why; ruled out: {'; '.join(looked)}"
        ),
        where=m.tensor,
        mismatches=ctx.mismatches,
        heatmap=heat,
        cause=f"output:{m.tensor}",
        details={"ruled_out": looked},
    )
    return f, ""


def _race(
    ctx: StepContext, seen: list[Mismatch] | None = None
) -> tuple[Finding | None, tuple[list[Mismatch], str] | None]:
    """The race experiment at the diagnosed step (the nondeterministic-replay probe runs it on each example's first
    step only), before any probe: replay this step's prepared batch twice from the state the replay started from, up
    to :data:`~graphsafe.diagnosis.padding.RACE_PAIRS` times (a race can land alike twice), or take ``seen`` (where
    two replays already differed); when they differ, :func:`~graphsafe.diagnosis.padding.race` asks whether the
    padding makes them race.  ``(its finding, None)``; or ``(None, (where two replays differed, why the padding is
    not the cause))`` for replays that race for another reason; or ``(None, None)``: they never differed."""
    pre = ctx.before_replay
    if pre is None:
        return None, None
    with replay_state_kept(ctx):
        mism = seen or []
        for _ in range(0 if seen else RACE_PAIRS):
            pre.restore()
            _, mism = ctx.replay_twice(pre.statics)
            if mism:
                break
        if not mism:
            return None, None
        pre.restore()
        found, why = race(ctx, pre.statics, mism)
        return found, (None if found is not None else (mism, why))


#: a buffer claim on a step whose replays race (not through the padding): no repair can be judged there
_READ_OFF_A_RACE = (
    "named {}, but two replays of this step differ, and no repair fixes the replay: a claim read off one replay of a "
    "racing graph"
)
#: kinds whose probes name a buffer from its history: the repair experiment must not name another
_BUFFER_CLAIMS = {FindingKind.LAZY_INIT, FindingKind.UNPERSISTED_METADATA}
_SLICE = re.compile(r"\[[^\[\]]*\]$")


def _claimed(ctx: StepContext, path: str) -> set[int]:
    """The storages a probe's ``buffer:`` cause names: those at ``path`` (a slice of it) at capture and now."""
    base = _SLICE.sub("", path)
    now = paths_by_storage(ctx.session.target)
    return {
        k for paths in (ctx.info.paths, now) for k, ps in paths.items() if any(_SLICE.sub("", p) == base for p in ps)
    }


def ruled_out(ctx: StepContext) -> list[str]:
    """What each probe looked at and saw, for a difference none of them explains: no buffer, kernel argument
    or branch was found at fault."""
    out = [f"{k.value}: {info.ruled_out}" for k, info in KINDS.items() if info.stage == "step" and info.ruled_out]
    noted = {line.split(":", 1)[0]: line for line in ctx.evidence.looked}
    for probe in at_stage("diagnosis"):
        if probe.name in noted:
            out.append(noted[probe.name])
        elif probe.name == FindingKind.FROZEN_HOST_VALUE.value:
            same = not diff_launches(ctx.info.launches, ctx.evidence.scratch.launches)
            out.append(
                f"{probe.name}: "
                + (
                    "an eager run of this batch launches what the capture did (kernels, scalars, grids, shapes)"
                    if same
                    else "launches differ from an eager run of this batch, but an eager run of the capture batch "
                    "differs too (the control): capturing changes them, not the batch"
                )
            )
        else:
            out.append(f"{probe.name}: found nothing")
    return out


def heatmap(ctx: StepContext, max_rows: int = 128, max_cols: int = 64) -> dict | None:
    """|graph - eager| per row for ``diff.png`` (:mod:`graphsafe.reports.heatmap` says the format).

    Over the first output: rows are token slots, padded rows counted.  When the outputs agree and
    static state differs, over the first differing static tensor instead: one row per KV block
    (labelled with the live request and token block owning it, ``unowned_rows`` for blocks none
    owns) or per first-dim row; past ``max_rows`` rows only the rows that differ.
    """

    def pooled(diff: torch.Tensor) -> tuple[list, int]:
        cols = diff.shape[1]
        step = max(1, -(-cols // max_cols))
        diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
        parts = [diff[:, i : i + step].amax(dim=1) for i in range(0, cols, step)]
        return (torch.stack(parts, dim=1).tolist() if parts else []), step

    def flat(t: torch.Tensor) -> torch.Tensor:
        return t.detach().double().reshape(t.shape[0], -1).cpu()

    statics = {f"static[{name!r}]": name for name in ctx.graph_static if name in ctx.eager_static}
    if not any(m.tensor.startswith("output") for m in ctx.mismatches):
        for m in ctx.mismatches:  # the outputs agree: draw the first differing static tensor
            g, e = (side.get(statics.get(m.tensor, "")) for side in (ctx.graph_static, ctx.eager_static))
            if g is None or e is None or g.shape != e.shape or g.dim() == 0 or g.numel() == 0:
                continue
            diff = (flat(g) - flat(e)).abs()
            rows = list(range(diff.shape[0]))
            if len(rows) > max_rows:
                rows = ((diff > 0) | diff.isnan()).any(dim=1).nonzero().reshape(-1).tolist()[:max_rows]
            values, step = pooled(diff[rows])
            data = {"values": values, "padded_rows": 0, "col_step": step, "source": m.tensor}
            if g.shape[0] != ctx.spec.num_blocks:
                return {**data, "rows": [f"row{r}" for r in rows], "row_kind": "row", "unowned_rows": []}
            owner = {b: (r, i) for r, table in enumerate(ctx.batch.block_table) for i, b in enumerate(table)}
            labels = [f"b{b} r{owner[b][0]}/tb{owner[b][1]}" if b in owner else f"b{b} none" for b in rows]
            unowned = [i for i, b in enumerate(rows) if b not in owner]
            return {**data, "rows": labels, "row_kind": "block", "unowned_rows": unowned}
    outs = ctx.graph.outputs
    if not outs or not ctx.eager_live or not outs[0].dtype.is_floating_point or outs[0].dim() == 0:
        return None
    full = outs[0].detach().float().reshape(outs[0].shape[0], -1).cpu()
    eager = ctx.eager_live[0].detach().float().reshape(ctx.eager_live[0].shape[0], -1).cpu()
    graph_live = ctx.graph_live[0].detach().float().reshape(ctx.graph_live[0].shape[0], -1).cpu()
    n = min(graph_live.shape[0], eager.shape[0], max_rows)
    if graph_live.shape[1] != eager.shape[1]:
        return None
    values, step = pooled((graph_live[:n] - eager[:n]).abs())
    labels = ["r{}t{}".format(*ctx.batch.token_owner(r)) for r in range(n)]
    pad_rows = min(full.shape[0], max_rows) - n
    return {
        "values": values,
        "rows": labels,
        "padded_rows": max(0, pad_rows),
        "col_step": step,
        "source": "output[0]",
        "row_kind": "token",
    }

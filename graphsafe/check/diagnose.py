"""Why a step's replay differed from eager: the diagnosis probes, in order, and the heatmap for reports."""

from __future__ import annotations

import torch

from ..capture.context import StepContext
from ..capture.evidence import Evidence
from ..findings import Finding, FindingKind
from ..probes import at_stage

__all__ = ["diagnose", "heatmap"]


def diagnose(ctx: StepContext) -> tuple[Finding, str]:
    """``(finding, probe name)`` for a step with mismatches: the first diagnosis probe that explains
    them, else a ``replay-mismatch`` (probe name '')."""
    ctx.evidence = Evidence(ctx)
    heat = heatmap(ctx)
    for probe in at_stage("diagnose"):
        f = probe.run(ctx)
        if f is not None:
            if not f.mismatches:
                f.mismatches = ctx.mismatches
            f.heatmap = heat
            return f, probe.name
    m = ctx.mismatches[0]
    f = Finding(
        kind=FindingKind.REPLAY_MISMATCH,
        message=f"{m.tensor} differs from eager ({m.count}/{m.total}, max abs {m.max_abs:.3g}) and no probe explains why",
        where=m.tensor,
        mismatches=ctx.mismatches,
        heatmap=heat,
        cause=f"output:{m.tensor}",
    )
    return f, ""


def heatmap(ctx: StepContext, max_rows: int = 128, max_cols: int = 64) -> dict | None:
    """|graph - eager| over the first output: rows are token slots, padded rows counted."""
    outs = ctx.graph.outputs
    if not outs or not ctx.eager_live or not outs[0].dtype.is_floating_point or outs[0].dim() == 0:
        return None
    full = outs[0].detach().float().reshape(outs[0].shape[0], -1).cpu()
    eager = ctx.eager_live[0].detach().float().reshape(ctx.eager_live[0].shape[0], -1).cpu()
    graph_live = ctx.graph_live[0].detach().float().reshape(ctx.graph_live[0].shape[0], -1).cpu()
    n = min(graph_live.shape[0], eager.shape[0], max_rows)
    if graph_live.shape[1] != eager.shape[1]:
        return None
    cols = graph_live.shape[1]
    step = max(1, -(-cols // max_cols))
    diff = (graph_live[:n] - eager[:n]).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    pooled = [diff[:, i : i + step].amax(dim=1) for i in range(0, cols, step)]
    values = torch.stack(pooled, dim=1).tolist() if pooled else []
    labels = ["r%dt%d" % ctx.batch.token_owner(r) for r in range(n)]
    pad_rows = min(full.shape[0], max_rows) - n
    return {"values": values, "rows": labels, "padded_rows": max(0, pad_rows), "col_step": step}

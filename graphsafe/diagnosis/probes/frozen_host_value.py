"""frozen-host-value: a host value fixed at capture differs from what this batch needs.

Stage ``diagnosis``.  The launches recorded at capture (kernels, scalar arguments,
grids, constexprs, tensor shapes, the Python branch taken, the host values of opaque
calls such as a FlashInfer plan) are diffed against an eager run of the failing batch,
padded the same way.  A control proves the cause: an eager run of the capture batch
itself must launch exactly what the capture did, so the difference comes from the batch
and not from capturing (a branch on ``capturing()``, a planner the capture skipped).  A frozen
value explains nothing an eager run with this batch's values shows too (:func:`padded_eager_too`):
a static tensor in which that run differs as well leaves the step to the later probes.

Numerics only.  A split count or tile choice frozen at capture can change only the order of a
reduction.  Such a finding is ``info``, with the measured difference, when two things hold:

* the graph equals an eager run of the same steps with the Triton launches given the captured
  values (:meth:`~graphsafe.diagnosis.evidence.Evidence.scratch_overridden`): the frozen values
  explain the whole difference;
* that run differs from eager with the values this batch needs by no more than the output
  dtype's resolution (bf16, fp16), or for fp32 on a GPU what TF32 rounding in a reduction
  explains (:func:`numerics_bound`).

Where the captured values cannot be put back into an eager run (a frozen branch such as a 2D/3D kernel
choice, an opaque call's frozen plan), the proof is the re-capture experiment instead: a graph captured
for this batch replays as eager does (:func:`~graphsafe.diagnosis.graph_evidence.recaptured_replays_as_eager`),
so the frozen choice is the whole difference, and the replayed graph is within the same bound of eager.
Anything else stays an error: a frozen tensor shape the batch's own graph cannot explain, a choice whose
result differs by more than the bound (a uniform-batch path taken for a mixed batch), or a batch that cannot
be captured.
With ``Tolerance(bitwise=True)`` (engines that need batch-invariant results) every frozen value
that changes a bit is an error.  The check's capture policies (minimal and drawn capture batches
besides the worst case) make a value that is right only for the worst case break in some phase.
"""

from __future__ import annotations

import math
from typing import Any

from ...engines.recording import Override
from ...findings import Finding, FindingKind
from ..context import StepContext
from ..frozen import beyond_bound, branch_against_capture, entry_point, frozen_values, host_decision
from ..graph_evidence import graph_evidence, recaptured_replays_as_eager

KIND = FindingKind.FROZEN_HOST_VALUE
STAGE = "diagnosis"


def _overrides(diffs: list[dict]) -> tuple[Override, ...] | None:
    """The captured values to run eager with, or None when one of them cannot be put back."""
    if not all(d.get("substitute") for d in diffs):
        return None
    return tuple(
        Override(d["kernel"], d["occurrence"], d["argument"], d["captured"] if d["kind"] == "grid" else d["value"])
        for d in diffs
    )


def _numerics_only(ctx: StepContext, diffs: list[dict]) -> str | None:
    """The info message when the frozen values only change rounding (module docstring), else None."""
    overrides = _overrides(diffs)
    if overrides is not None:
        run = ctx.evidence.scratch_overridden(overrides)
        if run.overridden != len(overrides):
            return None  # the eager run did not launch what the capture did: nothing proved
        if ctx.comparator.step(ctx.graph_live, run.live, ctx.graph_static, run.static or {}, ctx.batch):
            return None  # the graph differs from eager at the captured values too: something else is wrong
        if beyond_bound(ctx, run.live, run.static or {}):
            return None
        how = "the graph equals eager run with the captured values, which differs from eager with this batch's"
    else:  # the captured values cannot be put back into an eager run (a branch, an opaque plan): re-capture
        gev = graph_evidence(ctx, needed=True)
        if gev is not None and gev.comparable and gev.values_only and gev.correct:
            how = (
                f"this batch's own graph differs from the replayed one only in {len(gev.diffs)} frozen value(s) and "
                "replays as eager does; the replayed graph differs from eager"
            )
        elif recaptured_replays_as_eager(ctx):
            how = "a graph captured for this batch replays as eager does; the replayed graph differs from eager"
        else:
            return None
        if beyond_bound(ctx, ctx.graph_live, ctx.graph_static):
            return None
    worst = max(ctx.mismatches, key=lambda m: m.max_abs if not math.isnan(m.max_abs) else math.inf)
    return (
        f"; numerics only: {how} by at most {worst.max_abs:.3g} (relative {worst.max_rel:.3g}) in {worst.tensor}, "
        "within the output dtype's resolution (or TF32 rounding for fp32 on a GPU); use Tolerance(bitwise=True) "
        "where results must be batch-invariant"
    )


def padded_eager_too(ctx: StepContext) -> list[str]:
    """Mismatched static tensors in which an eager run of this example, padded as the graph ran it and with the
    values this batch needs (:attr:`~graphsafe.diagnosis.evidence.Evidence.scratch`), differs from the reference
    too: no frozen value is needed for that difference (padding or history is), so the frozen values do not
    explain the step."""
    again = {m.tensor for m in ctx.evidence.scratch.mismatches}
    return [m.tensor for m in ctx.mismatches if m.tensor.startswith("static[") and m.tensor in again]


def run(ctx: StepContext) -> Finding | None:
    diffs, seen = frozen_values(ctx)
    if not diffs:
        return None
    d = diffs[0]
    again = padded_eager_too(ctx)
    if again:
        ctx.evidence.note(
            KIND.value,
            f"{d['kernel']} {d['argument']} differs from an eager run of this batch, but that run, padded as the "
            f"graph ran it, differs in {', '.join(again)} too: not the frozen value's doing",
        )
        return None
    if d["kind"] == "branch" and seen == "launches":
        msg = (
            f"the graph froze a Python branch: capture launched {d['captured']}, this batch runs {d['needed']} "
            f"(at {d['where']})"
        )
        where = f"{d['kernel']} <launch sequence>"
    elif d["kind"] == "branch":
        msg, where = branch_against_capture(d), f"{d['kernel']} <launch sequence>"
    else:
        entry = entry_point(ctx.info.launches, ctx.evidence.scratch.launches) if d.get("tensor") else None
        if entry is not None:  # a shape the value gave a consumer: name the op where the value enters instead
            d = {**entry, "kind": "argument", "triton": False}
            diffs = [d, *diffs]
        msg = (
            f"{d['kernel']} {d['argument']}: captured {d['captured']}, this batch needs {d['needed']} (at {d['where']})"
        )
        if len(diffs) > 1:
            msg += f"; {len(diffs) - 1} more frozen value(s): " + ", ".join(
                f"{x['kernel']}.{x['argument']}" for x in diffs[1:4]
            )
        where = f"{d['kernel']}.{d['argument']}"
    if seen == "graph":
        msg += " (read from the captured graph: a capture of this batch holds the other value)"
    cause = "host:" + (host_decision(d["where"]) if seen == "launches" else f"kernel {d['kernel']}")
    severity = "error"
    if not ctx.comparator.tolerance.bitwise and not ctx.unreplayable:  # (a replay that never ends is no rounding)
        note = _numerics_only(ctx, diffs)
        if note is not None:
            severity, msg = "info", msg + note
    details: dict[str, Any] = {
        "diffs": [{k: v for k, v in x.items() if k not in ("value", "chunks")} for x in diffs[:10]]
    }
    details["seen_in"] = seen
    return Finding(kind=KIND, message=msg, where=where, details=details, cause=cause, severity=severity)

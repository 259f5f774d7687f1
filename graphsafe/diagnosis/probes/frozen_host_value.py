"""frozen-host-value: a host value fixed at capture differs from what this batch needs.

Stage ``diagnose``.  The launches recorded at capture (kernels, scalar arguments,
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

Anything else stays an error: a frozen branch, a frozen tensor shape, an opaque call's frozen
plan (its values cannot be put back into an eager run), or a difference larger than the bound.
With ``Tolerance(bitwise=True)`` (engines that need batch-invariant results) every frozen value
that changes a bit is an error.  The check's capture policies (minimal and drawn capture batches
besides the worst case) make a value that is right only for the worst case break in some phase.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import torch

from ...capture.compare import compare
from ...engines.recording import Launch, Override, TensorArg
from ...findings import Finding, FindingKind, Mismatch
from ..context import StepContext
from ..graph_evidence import graph_evidence, unseen_kernels

KIND = FindingKind.FROZEN_HOST_VALUE
STAGE = "diagnose"

#: relative resolution of each output dtype: one unit in the last place, relative
_RESOLUTION = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float64: 2.0**-40}
#: fp32 results: what TF32 rounding (10 mantissa bits) inside a reduction moves on a GPU; on the CPU
#: fp32 reductions round at fp32, and a reordered one moves a result by much less
_FP32 = {"cuda": 2.0**-10, "cpu": 2.0**-12}


def numerics_bound(dtype: torch.dtype, device: torch.device) -> float:
    """Relative bound on how far a reordered reduction moves a result of ``dtype`` on ``device``: the
    dtype's resolution for bf16 and fp16, TF32's for fp32 on a GPU.  It applies elementwise as
    ``|a - b| <= bound * (|b| + max|b|)``: relative to each value and to the tensor's scale, since a
    value near zero is the sum of terms of the tensor's magnitude."""
    if dtype == torch.float32:
        return _FP32.get(device.type, _FP32["cuda"])
    return _RESOLUTION.get(dtype, 2.0**-7 if dtype.is_floating_point else 0.0)


def _fmt(v) -> str:
    if isinstance(v, TensorArg):
        return v.short()
    if isinstance(v, tuple) and any(isinstance(x, TensorArg) for x in v):
        return "(" + ", ".join(_fmt(x) for x in v) + ")"
    return repr(v)


def _shape_only(v):
    if isinstance(v, TensorArg):
        return ("tensor", v.shape, v.dtype)
    if isinstance(v, tuple):
        return tuple(_shape_only(x) for x in v)
    return v


def _scalar(v) -> bool:
    return isinstance(v, (bool, int, float)) or (isinstance(v, tuple) and all(isinstance(x, int) for x in v))


def diff_launches(captured: list[Launch], needed: list[Launch]) -> list[dict]:
    """Differences between two launch lists, Triton launches first.

    Only launches that do device work count: views and bookkeeping ops (``detach``, ``slice``)
    differ with how a wrapper slices its buffers, and are no branch of their own.  A difference in
    one launch carries ``occurrence`` (which launch of that kernel it is) and, when an eager run
    could be given the captured value back (a Triton scalar or grid), ``substitute``.
    """
    captured = [launch for launch in captured if launch.device_work]
    needed = [launch for launch in needed if launch.device_work]
    diffs: list[dict] = []
    a = [(l.kind, l.name) for l in captured]
    b = [(l.kind, l.name) for l in needed]
    if a != b:
        sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                continue
            cap = [captured[i] for i in range(i1, i2)]
            need = [needed[j] for j in range(j1, j2)]
            diffs.append(
                {
                    "kind": "branch",
                    "kernel": (cap or need)[0].name,
                    "argument": "<launch sequence>",
                    "captured": [l.name for l in cap if l.kind == "triton"] or [l.name for l in cap][:4],
                    "needed": [l.name for l in need if l.kind == "triton"] or [l.name for l in need][:4],
                    "where": (need or cap)[0].where,
                    "triton": any(l.kind == "triton" for l in cap + need),
                }
            )
        diffs.sort(key=lambda d: not d["triton"])
        return diffs
    seen: dict[str, int] = {}
    for la, lb in zip(captured, needed):
        occurrence = seen.get(la.name, 0)
        seen[la.name] = occurrence + 1
        base = {
            "kernel": la.name,
            "where": lb.where,
            "triton": la.kind == "triton",
            "occurrence": occurrence,
            "launch": la.kind,
        }
        if la.grid != lb.grid:
            diffs.append(
                {
                    **base,
                    "kind": "grid",
                    "argument": "grid",
                    "captured": la.grid,
                    "needed": lb.grid,
                    "substitute": la.kind == "triton",
                }
            )
        for name in la.args:
            va, vb = la.args[name], lb.args.get(name)
            if _shape_only(va) != _shape_only(vb):
                diffs.append(
                    {
                        **base,
                        "kind": "argument",
                        "argument": name,
                        "captured": _fmt(va),
                        "needed": _fmt(vb),
                        "substitute": la.kind == "triton" and _scalar(va),
                        "value": va,
                        "tensor": _shape_only(va) != va,
                    }
                )
    # kernels first (Triton, then calls such as FlashInfer's), torch ops last; host values before tensor shapes
    diffs.sort(key=lambda d: (not d["triton"], d["launch"] != "opaque", d.get("tensor", False)))
    return diffs


def _overrides(diffs: list[dict]) -> tuple[Override, ...] | None:
    """The captured values to run eager with, or None when one of them cannot be put back."""
    if not all(d.get("substitute") for d in diffs):
        return None
    return tuple(
        Override(d["kernel"], d["occurrence"], d["argument"], d["captured"] if d["kind"] == "grid" else d["value"])
        for d in diffs
    )


def _beyond_bound(ctx: StepContext, live: list, static: dict) -> list[Mismatch]:
    """Where ``live`` and ``static`` (a run at the captured values) differ from eager at the needed ones by more
    than :func:`numerics_bound`."""
    pairs = [(f"output[{i}]", a, b) for i, (a, b) in enumerate(zip(live, ctx.eager_live))]
    pairs += [(f"static[{k!r}]", a, ctx.eager_static[k]) for k, a in static.items() if k in ctx.eager_static]
    out = []
    for name, a, b in pairs:
        if a.shape != b.shape or not b.dtype.is_floating_point or b.numel() == 0:
            m = compare(name, a, b)
        else:
            bound = numerics_bound(b.dtype, b.device)
            scale = float(b.detach().float().abs().nan_to_num(0.0).amax())
            m = compare(name, a, b, rtol=bound, atol=bound * scale)
        if m is not None:
            out.append(m)
    return out


def _numerics_only(ctx: StepContext, diffs: list[dict]) -> str | None:
    """The info message when the frozen values only change rounding (module docstring), else None."""
    overrides = _overrides(diffs)
    if overrides is not None:
        run = ctx.evidence.scratch_overridden(overrides)
        if run.overridden != len(overrides):
            return None  # the eager run did not launch what the capture did: nothing proved
        if ctx.comparator.step(ctx.graph_live, run.live, ctx.graph_static, run.static or {}, ctx.batch):
            return None  # the graph differs from eager at the captured values too: something else is wrong
        if _beyond_bound(ctx, run.live, run.static or {}):
            return None
        how = "the graph equals eager run with the captured values, which differs from eager with this batch's"
    else:  # the captured values cannot be put back into an eager run: the graph itself as the proof
        gev = graph_evidence(ctx, needed=True)
        if gev is None or not gev.comparable or not gev.values_only or not gev.correct:
            return None
        if _beyond_bound(ctx, ctx.graph_live, ctx.graph_static):
            return None
        how = (
            f"this batch's own graph differs from the replayed one only in {len(gev.diffs)} frozen value(s) and "
            "replays as eager does; the replayed graph differs from eager"
        )
    worst = max(ctx.mismatches, key=lambda m: m.max_abs if not math.isnan(m.max_abs) else math.inf)
    return (
        f"; numerics only: {how} by at most {worst.max_abs:.3g} (relative {worst.max_rel:.3g}) in {worst.tensor}, "
        "within the output dtype's resolution (or TF32 rounding for fp32 on a GPU); use Tolerance(bitwise=True) "
        "where results must be batch-invariant"
    )


def _host_decision(where: str) -> str:
    """The host code that chose a frozen value: ``file in function`` of the launch's line (one decision can freeze
    several values, in several launches of one function), or the kernel a graph node names."""
    if where.startswith("graph node"):
        return where
    file_line, _, func = where.partition(" in ")
    return f"{file_line.rsplit(':', 1)[0]} in {func}" if func else where


def frozen_values(ctx: StepContext) -> tuple[list[dict], str]:
    """The frozen values this step shows, and where they were seen: the recorded launches against an eager run
    of this batch (with the control), else, on the CUDA engine, the graph against this batch's own graph."""
    diffs = diff_launches(ctx.info.launches, ctx.evidence.scratch.launches)
    # the control: eager on the capture batch itself must launch what the capture did; if it does not,
    # the capture differs from eager whatever the batch (a branch on capturing(), a skipped planner)
    if diffs and not diff_launches(ctx.info.launches, ctx.evidence.capture_batch_launches):
        return diffs, "launches"
    gev = graph_evidence(ctx)
    if gev is None or not gev.comparable or not gev.diffs:
        return [], ""
    unseen = set(unseen_kernels(ctx))  # the recorded launches already say every host value of the others
    out = sorted((d for d in gev.diffs if _concerns(d, unseen)), key=lambda d: d["kind"] != "branch")
    if not out:
        return [], ""
    for d in out:
        d["substitute"] = False
    return out, "graph"


def padded_eager_too(ctx: StepContext) -> list[str]:
    """Mismatched static tensors in which an eager run of this example, padded as the graph ran it and with the
    values this batch needs (:attr:`~graphsafe.diagnosis.evidence.Evidence.scratch`), differs from the reference
    too: no frozen value is needed for that difference (padding or history is), so the frozen values do not
    explain the step."""
    again = {m.tensor for m in ctx.evidence.scratch.mismatches}
    return [m.tensor for m in ctx.mismatches if m.tensor.startswith("static[") and m.tensor in again]


def _concerns(diff: dict, kernels: set[str]) -> bool:
    """Is a graph diff about one of ``kernels``: a value of its launch, or a branch that launches it?"""
    if diff["kind"] == "branch":
        return any(label in kernels for label in (*diff["captured"], *diff["needed"]))
    return diff["kernel"] in kernels


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
        msg = (
            f"the graph froze a branch: it launches {d['captured']} where a capture of this batch launches "
            f"{d['needed']} (at {d['where']})"
        )
        where = f"{d['kernel']} <launch sequence>"
    else:
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
    cause = "host:" + (_host_decision(d["where"]) if seen == "launches" else f"kernel {d['kernel']}")
    severity = "error"
    if d["kind"] != "branch" and not ctx.comparator.tolerance.bitwise:
        note = _numerics_only(ctx, diffs)
        if note is not None:
            severity, msg = "info", msg + note
    details: dict[str, Any] = {
        "diffs": [{k: v for k, v in x.items() if k not in ("value", "chunks")} for x in diffs[:10]]
    }
    details["seen_in"] = seen
    return Finding(kind=KIND, message=msg, where=where, details=details, cause=cause, severity=severity)

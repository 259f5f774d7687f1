"""frozen-host-value: a host value fixed at capture differs from what this batch needs.

Stage ``diagnose``.  The launches recorded at capture (kernels, scalar arguments,
grids, constexprs, tensor shapes, the Python branch taken) are diffed against an
eager run of the failing batch, padded the same way.  A control proves the cause:
an eager run of the capture batch itself must launch exactly what the capture did,
so the difference comes from the batch and not from capturing (a branch on
``capturing()``, a planner the capture skipped).  A frozen value whose results
still agree within what a reordered reduction explains (a split count, say) is
reported as info, not as an error.  The check's capture policies
(minimal and drawn capture batches besides the worst case) make a value that is
right only for the worst case break in some phase.
"""

from __future__ import annotations

import difflib

from ..capture.context import StepContext
from ..engines.recording import Launch, TensorArg
from ..findings import Finding, FindingKind

KIND = FindingKind.FROZEN_HOST_VALUE
STAGE = "diagnose"


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


def diff_launches(captured: list[Launch], needed: list[Launch]) -> list[dict]:
    """Differences between two launch lists, Triton launches first.

    Only launches that do device work count: views and bookkeeping ops (``detach``, ``slice``)
    differ with how a wrapper slices its buffers, and are no branch of their own.
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
            diffs.append({
                "kind": "branch",
                "kernel": (cap or need)[0].name,
                "argument": "<launch sequence>",
                "captured": [l.name for l in cap if l.kind == "triton"] or [l.name for l in cap][:4],
                "needed": [l.name for l in need if l.kind == "triton"] or [l.name for l in need][:4],
                "where": (need or cap)[0].where,
                "triton": any(l.kind == "triton" for l in cap + need),
            })
        diffs.sort(key=lambda d: not d["triton"])
        return diffs
    for la, lb in zip(captured, needed):
        if la.grid != lb.grid:
            diffs.append({"kind": "grid", "kernel": la.name, "argument": "grid", "captured": la.grid,
                          "needed": lb.grid, "where": lb.where, "triton": la.kind == "triton"})
        for name in la.args:
            va, vb = la.args[name], lb.args.get(name)
            if _shape_only(va) != _shape_only(vb):
                diffs.append({"kind": "argument", "kernel": la.name, "argument": name, "captured": _fmt(va),
                              "needed": _fmt(vb), "where": lb.where, "triton": la.kind == "triton"})
    diffs.sort(key=lambda d: not d["triton"])
    return diffs


def run(ctx: StepContext) -> Finding | None:
    diffs = diff_launches(ctx.info.launches, ctx.evidence.scratch.launches)
    if not diffs:
        return None
    # the control: eager on the capture batch itself must launch what the capture did; if it does not,
    # the capture differs from eager whatever the batch (a branch on capturing(), a skipped planner)
    if diff_launches(ctx.info.launches, ctx.evidence.capture_batch_launches):
        return None
    d = diffs[0]
    if d["kind"] == "branch":
        msg = (
            f"the graph froze a Python branch: capture launched {d['captured']}, this batch runs {d['needed']} "
            f"(at {d['where']})"
        )
        where, cause = f"{d['kernel']} <launch sequence>", f"branch:{d['where']}"
    else:
        msg = f"{d['kernel']} {d['argument']}: captured {d['captured']}, this batch needs {d['needed']} (at {d['where']})"
        where = f"{d['kernel']}.{d['argument']}"
        cause = f"argument:{where}"
    severity = "error"
    if all(x["kind"] != "branch" for x in diffs) and not ctx.comparator.step(
            ctx.graph_live, ctx.eager_live, ctx.graph_static, ctx.eager_static, ctx.batch, reorder=True):
        severity = "info"
        msg += ("; graph and eager agree within what reordering a reduction explains, so the frozen value "
                "changes rounding, not the result")
    return Finding(kind=KIND, message=msg, where=where, details={"diffs": diffs[:10]}, cause=cause,
                   severity=severity)

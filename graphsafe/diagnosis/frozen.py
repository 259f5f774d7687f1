"""Which host values a capture froze: the recorded launches of the capture against an eager run of this batch
(with the capture batch's own eager run as the control), else the captured graph against this batch's own graph;
and how far a reordered reduction may move a result (:func:`numerics_bound`).  Shared by the frozen-host-value
probe, the other probes that must not claim a frozen value's doing, and the diagnosis loop's "ruled out" line."""

from __future__ import annotations

import difflib

import torch

from ..capture.compare import compare
from ..engines.recording import Launch, TensorArg
from ..findings import Finding, FindingKind, Mismatch
from .context import StepContext
from .graph_evidence import graph_evidence, recaptured_replays_as_eager, unseen_kernels

__all__ = [
    "numerics_bound",
    "beyond_bound",
    "diff_launches",
    "frozen_values",
    "frozen_by_recapture",
    "branch_against_capture",
    "host_decision",
    "concerns",
]

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


def host_decision(where: str) -> str:
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
    out = sorted((d for d in gev.diffs if concerns(d, unseen)), key=lambda d: d["kind"] != "branch")
    if not out:
        return [], ""
    for d in out:
        d["substitute"] = False
    return out, "graph"


def concerns(diff: dict, kernels: set[str]) -> bool:
    """Is a graph diff about one of ``kernels``: a value of its launch, or a branch that launches it?"""
    if diff["kind"] == "branch":
        return any(label in kernels for label in (*diff["captured"], *diff["needed"]))
    return diff["kernel"] in kernels


def beyond_bound(ctx: StepContext, live: list, static: dict) -> list[Mismatch]:
    """Where ``live`` and ``static`` (the graph's, or another run's) differ from the step's eager reference by more
    than :func:`numerics_bound`: what a reordered reduction cannot explain."""
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


def entry_point(captured: list[Launch], needed: list[Launch]) -> dict | None:
    """Where a frozen value enters the launches: the first launch, views and bookkeeping ops included, one of whose
    host values (not a tensor) differs between the capture and an eager run of this batch (the slice
    ``x[: self.n]`` by a batch-derived int, before the einsum whose tensor shape it changes).  None when the launch
    sequences do not line up there or no host value differs."""
    a = [(x.kind, x.name) for x in captured]
    b = [(x.kind, x.name) for x in needed]
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for i, j, n in sm.get_matching_blocks():
        for la, lb in zip(captured[i : i + n], needed[j : j + n]):
            for name, va in la.args.items():
                vb = lb.args.get(name)
                if _scalar(va) and _scalar(vb) and va != vb:
                    return {"kernel": la.name, "argument": name, "captured": va, "needed": vb, "where": lb.where}
    return None


def branch_against_capture(d: dict) -> str:
    """A frozen branch (a ``branch`` diff) seen against a capture of this batch, in words."""
    return (
        f"the graph froze a branch: it launches {d['captured']} where a capture of this batch launches "
        f"{d['needed']} (at {d['where']})"
    )


def frozen_by_recapture(ctx: StepContext) -> Finding | None:
    """The re-capture experiment, for a difference that no probe explains and no repaired buffer fixes: a graph
    captured for this batch (a fresh instance, captured as the session captures) replays as eager does, and its
    recorded launches differ from the replayed graph's: what the replayed graph froze is the cause.  The launch diff
    needs no control here (an eager run of the capture batch is one; a planner the capture skips defeats it): both
    sides are captures of one graph size.  ``info`` (numerics only) where the replayed graph is within the output
    dtype's bound of eager and the tolerance is not bitwise.  None when the re-capture does not replay right or
    launches what the replayed graph does."""
    if not recaptured_replays_as_eager(ctx):
        return None
    diffs = diff_launches(ctx.info.launches, ctx.evidence.memo.get("recaptured_launches") or [])
    if not diffs:
        return None
    d = diffs[0]
    if d["kind"] == "branch":
        msg, where = branch_against_capture(d), f"{d['kernel']} <launch sequence>"
    else:
        msg = (
            f"{d['kernel']} {d['argument']}: captured {d['captured']}, a capture of this batch holds {d['needed']} "
            f"(at {d['where']})"
        )
        where = f"{d['kernel']}.{d['argument']}"
    if len(diffs) > 1:
        msg += f"; {len(diffs) - 1} more frozen value(s): " + ", ".join(
            f"{x['kernel']}.{x['argument']}" for x in diffs[1:4]
        )
    m = ctx.mismatches[0]
    msg += (
        f"; {m.tensor} differs from eager ({m.count}/{m.total}, max abs {m.max_abs:.3g}), no repair of the buffers the "
        "graph reads fixes the replay, and a graph captured for this batch replays as eager does"
    )
    severity = "error"
    if not ctx.comparator.tolerance.bitwise and not beyond_bound(ctx, ctx.graph_live, ctx.graph_static):
        severity = "info"
        msg += (
            f"; numerics only: the replayed graph differs from eager by at most {m.max_abs:.3g} in {m.tensor}, within "
            "the output dtype's resolution (or TF32 rounding for fp32 on a GPU); use Tolerance(bitwise=True) where "
            "results must be batch-invariant"
        )
    return Finding(
        kind=FindingKind.FROZEN_HOST_VALUE,
        message=msg,
        where=where,
        mismatches=ctx.mismatches,
        cause="host:" + host_decision(d["where"]),
        severity=severity,
        details={
            "diffs": [{k: v for k, v in x.items() if k not in ("value", "chunks")} for x in diffs[:10]],
            "seen_in": "recapture",
        },
    )

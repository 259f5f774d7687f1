"""A failed replay's cause, decided in a fresh process: the example again, up to the step whose replay faulted
or never ended, and that step diagnosed without replaying it (:mod:`graphsafe.diagnosis.unreplayable`).

The sandbox's parent calls this (through a fresh child) when a check's process was lost to such a replay: a
:class:`~graphsafe.errors.ReplayHung` or a :class:`~graphsafe.errors.ContextBroken` that names its example.
"""

from __future__ import annotations

import time
from typing import Any

from ..capture.policies import POLICIES
from ..contract import Batch
from ..errors import UsageError
from ..findings import CheckResult
from .api import phase_session, prepared, run_one
from .options import CheckOptions
from .plans import Plan

__all__ = ["cause_without_replay"]


def cause_without_replay(target: Any, options: CheckOptions, fault: dict) -> CheckResult:
    """Run ``fault``'s example (``steps``: batches as dicts, ``step``: the one whose replay failed, ``size``: its
    graph's size, ``capture``: ``{"policy": name, "batch": a drawn capture batch or None}``) on a graph captured
    as the check captured it, its earlier steps replayed and compared as usual, the failed step diagnosed without
    a replay.  The result holds the finding (none when nothing that needs no replay explains the step)."""
    t0 = time.perf_counter()
    p = prepared(target, options)
    steps = [Batch.from_dict(b) for b in fault.get("steps") or ()]
    step = int(fault.get("step", -1))
    capture = fault.get("capture") or {}
    if not 0 <= step < len(steps):
        raise UsageError(f"the failed replay's step {step} is not one of its example's {len(steps)} steps")
    if capture.get("batch") is not None:
        plan, main = Plan(tuple(steps[: step + 1]), Batch.from_dict(capture["batch"]), int(fault["size"])), None
    else:
        policy = POLICIES.get(capture.get("policy") or "worst", POLICIES["worst"])
        if policy.batch is None:  # a drawn capture without its batch: the phase's session is the worst case's
            policy = POLICIES["worst"]
        plan = Plan(tuple(steps[: step + 1]))
        main = phase_session(p, options.sizes_for(p.spec), policy)
        if main is None:  # the capture failed this time: that finding is the answer
            return p.result
    return run_one(p, main, plan, t0, unreplayable=step)

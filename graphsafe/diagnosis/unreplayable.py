"""The cause of a step whose replay faults or never ends, decided without replaying it.

Such a replay ends its process (an illegal address leaves the CUDA context unusable; a kernel that does not end
holds the device until the process is killed), so the diagnosis runs in a fresh process: the example's earlier
steps run as before, and at the step whose replay failed only the probes the registry marks ``without_replay``
run (:attr:`graphsafe.findings.KindInfo.without_replay`): they decide from what needs no replay of this graph,
the recorded launches against an eager run of this batch (``frozen-host-value``, the graph diff on CUDA too),
warm-up launches the capture lacks (``lazy-init``), the write ledger of this step's ``prepare()`` against what the
graph reads (``unpersisted-metadata``, its carried-buffer shape aside) and the liveness of what the graph reads
(``stale-pointer``).
Their claims stand untested: the claim and repair experiments replay the graph.  ``None`` when none of them
explains the step: the caller reports the fault as it was.
"""

from __future__ import annotations

from ..findings import KINDS, Finding
from . import at_stage
from .context import StepContext
from .evidence import Evidence

__all__ = ["diagnose_without_replay", "WITHOUT_REPLAY"]

#: the probes that run for a step that cannot replay, by stage
WITHOUT_REPLAY = {
    stage: tuple(p for p in at_stage(stage) if KINDS[p.kind].without_replay) for stage in ("step", "diagnosis")
}


def diagnose_without_replay(ctx: StepContext) -> tuple[Finding | None, str]:
    """``(finding, probe name)`` for ``ctx`` (prepared, not replayed, ``ctx.unreplayable`` set, ``ctx.mismatches``
    standing for the failed replay; no eager reference: these probes run their own fresh instances): the first
    ``without_replay`` diagnosis probe that explains it; ``(None, '')`` when none does."""
    assert ctx.unreplayable, "diagnose_without_replay is for a step whose replay faults or never ends"
    ctx.evidence = Evidence(ctx)
    for probe in WITHOUT_REPLAY["diagnosis"]:
        f = probe.run(ctx)
        if f is not None:
            f.mismatches = f.mismatches or list(ctx.mismatches)
            return f, probe.name
    return None, ""

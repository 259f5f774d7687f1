"""graphsafe: find CUDA-graph capture hazards in attention backends and GPU kernels.

Public API::

    import graphsafe
    result = graphsafe.check(MyTarget, engine="auto", examples=100)
    for f in result.findings:
        print(f.kind, f.where, f.message)

    # in a serving engine's graph runner: check each replay's inputs (graphsafe.guard module)
    guard = graphsafe.guard.Guard(owner=builder, mode="sample", every=100)

The layers under it, each importing only the ones below: ``frontend`` (command line, pytest
plugin, the runner) -> ``guard`` (the runtime guard) -> ``reports`` -> ``checker`` (options, plans,
the step loop, the audit) -> ``probes`` -> ``capture`` (capture session, ledger, comparison,
capture policies) -> ``engines`` (CUDA graphs, the CPU emulator, the recorder) -> the base modules
``contract``, ``findings``, ``errors`` and ``values``.
"""

from . import guard
from ._version import __version__
from .capture.compare import Tolerance
from .checker import AuditResult, CheckOptions, reproduce
from .contract import Batch, CaptureSpec, Support, Target, capturing
from .engines.recording import opaque_call
from .errors import (
    CaptureError, ContextBroken, ContractError, GraphsafeError, GuardError, InternalError, ReplayHung, SpecError,
    TargetCrashed,
    TargetFailure, TargetRaised, TargetTimeout, UsageError,
)
from .findings import CheckResult, Finding, FindingError, FindingKind, Mismatch
from .frontend.runner import audit, check
from .probes import PROBES
from .values import derive_seed, seeded


__all__ = [
    "__version__",
    "Batch", "CaptureSpec", "Support", "Target", "capturing", "opaque_call", "check", "reproduce", "audit", "AuditResult",
    "CheckOptions", "Tolerance",
    "CheckResult", "Finding", "FindingError", "FindingKind", "Mismatch", "PROBES", "derive_seed", "seeded",
    "GraphsafeError", "UsageError", "ContractError", "SpecError", "TargetFailure", "TargetRaised", "TargetCrashed",
    "ContextBroken", "TargetTimeout", "ReplayHung", "CaptureError", "GuardError", "InternalError", "guard",
]

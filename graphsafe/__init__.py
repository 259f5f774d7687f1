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
the step loop, the audit) -> ``diagnosis`` -> ``capture`` (capture session, ledger, comparison,
capture policies) -> ``engines`` (CUDA graphs, the CPU emulator, the recorder) -> the base modules
``contract``, ``findings``, ``errors`` and ``values``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name is imported on first use
    from . import flashinfer, guard
    from .capture.compare import Tolerance
    from .checker import AuditResult, CheckOptions, reproduce
    from .contract import Batch, CaptureSpec, Support, Target, capturing
    from .diagnosis import PROBES
    from .engines.recording import opaque_call
    from .errors import (
        CaptureError,
        ContextBroken,
        ContractError,
        GraphsafeError,
        GuardError,
        InternalError,
        ReplayHung,
        SpecError,
        TargetCrashed,
        TargetFailure,
        TargetRaised,
        TargetTimeout,
        UsageError,
    )
    from .findings import CheckResult, Finding, FindingError, FindingKind, Mismatch
    from .frontend.runner import audit, check
    from .values import derive_seed, seeded

#: public name -> the module it lives in (imported when the name is first used: ``import graphsafe``
#: alone imports neither torch nor triton, so that the pytest plugin costs nothing in a run that
#: does not use it)
_HOMES = {
    "guard": ".guard",
    "flashinfer": ".flashinfer",
    "Tolerance": ".capture.compare",
    "AuditResult": ".checker",
    "CheckOptions": ".checker",
    "reproduce": ".checker",
    "Batch": ".contract",
    "CaptureSpec": ".contract",
    "Support": ".contract",
    "Target": ".contract",
    "capturing": ".contract",
    "opaque_call": ".engines.recording",
    **dict.fromkeys(
        (
            "CaptureError",
            "ContextBroken",
            "ContractError",
            "GraphsafeError",
            "GuardError",
            "InternalError",
            "ReplayHung",
            "SpecError",
            "TargetCrashed",
            "TargetFailure",
            "TargetRaised",
            "TargetTimeout",
            "UsageError",
        ),
        ".errors",
    ),
    **dict.fromkeys(("CheckResult", "Finding", "FindingError", "FindingKind", "Mismatch"), ".findings"),
    "audit": ".frontend.runner",
    "check": ".frontend.runner",
    "PROBES": ".diagnosis",
    "derive_seed": ".values",
    "seeded": ".values",
}

__all__ = [
    "__version__",
    "Batch",
    "CaptureSpec",
    "Support",
    "Target",
    "capturing",
    "opaque_call",
    "check",
    "reproduce",
    "audit",
    "AuditResult",
    "CheckOptions",
    "Tolerance",
    "CheckResult",
    "Finding",
    "FindingError",
    "FindingKind",
    "Mismatch",
    "PROBES",
    "derive_seed",
    "seeded",
    "GraphsafeError",
    "UsageError",
    "ContractError",
    "SpecError",
    "TargetFailure",
    "TargetRaised",
    "TargetCrashed",
    "ContextBroken",
    "TargetTimeout",
    "ReplayHung",
    "CaptureError",
    "GuardError",
    "InternalError",
    "guard",
    "flashinfer",
]


def __getattr__(name: str) -> Any:
    """PEP 562: import a public name's module on first use, then keep the name here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'graphsafe' has no attribute {name!r}")
    module = importlib.import_module(home, __name__)
    value = module if name in ("guard", "flashinfer") else getattr(module, name)
    globals()[name] = value  # later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

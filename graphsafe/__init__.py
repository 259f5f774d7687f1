"""graphsafe: find CUDA-graph capture hazards in attention backends and GPU kernels.

Public API::

    import graphsafe
    result = graphsafe.check(MyTarget, engine="auto", examples=100)
    for f in result.findings:
        print(f.kind, f.where, f.message)
"""

from .contract import Batch, CaptureSpec, Support, Target, capturing
from .findings import CheckResult, Finding, FindingError, FindingKind, Mismatch
from .values import derive_seed, seeded

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "CaptureSpec",
    "CheckResult",
    "Finding",
    "FindingError",
    "FindingKind",
    "Mismatch",
    "Support",
    "Target",
    "capturing",
    "check",
    "reproduce",
    "derive_seed",
    "seeded",
    "PROBES",
    "TargetError",
]


def __getattr__(name: str):
    # check() pulls in torch dispatch machinery and the engines; import lazily.
    if name in ("check", "reproduce", "TargetError"):
        from . import checker

        return getattr(checker, name)
    if name == "PROBES":
        from .probes import PROBES

        return PROBES
    raise AttributeError(f"module 'graphsafe' has no attribute {name!r}")

"""Which batches can one captured graph of a target safely serve?  The support-level audit.

Serving engines ask each attention backend how far its CUDA graphs can be trusted
(``Support``: single-token decode, uniform batches, any mix), and those levels are declared by
hand.  :func:`audit` checks the target at every level, with the same machinery as a check (one
search per level), and compares the highest safe level with the declared one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..contract import Support
from ..findings import CheckResult, Finding, FindingKind
from .api import run_check
from .options import CheckOptions
from .targets import resolve_target, target_name, validate_target

__all__ = ["audit", "AuditResult", "LEVELS"]

#: the levels an audit checks, lowest first
LEVELS = (Support.UNIFORM_SINGLE_TOKEN_DECODE, Support.UNIFORM_BATCH, Support.ALWAYS)


def _at_level(cls: type, level: Support) -> type:
    """``cls`` declaring ``level`` (same name, so findings and reports name the target itself)."""
    return type(cls.__name__, (cls,), {"support": level, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__, "name": target_name(cls)})


@dataclass
class AuditResult:
    """Per level, the check's result; the highest level that is safe, the declared one, and the verdict."""

    target: str
    declared: Support
    results: dict[Support, CheckResult] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def safe(self) -> Support:
        """The highest level whose check, and every lower level's, found nothing (NEVER when none)."""
        best = Support.NEVER
        for level in LEVELS:
            r = self.results.get(level)
            if r is None or not r.ok:
                break
            best = level
        return best

    @property
    def ok(self) -> bool:
        """True unless the declared level is higher than the safe one."""
        return not [f for f in self.findings if f.severity == "error"]


def audit(target: Any, options: CheckOptions = CheckOptions()) -> AuditResult:
    """Check ``target`` at every support level and compare the safe level with the declared one.

    The result's findings hold one ``support-mismatch``: an error when the declared level is higher
    than the highest safe one (naming the level and finding that break it), info when a higher level
    than the declared one is safe too.

    Example::

        r = graphsafe.audit("flex", engine="emulate", examples=20)
        r.safe, r.declared   # (Support.ALWAYS, Support.ALWAYS)
    """
    t0 = time.perf_counter()
    cls, name = resolve_target(target)
    validate_target(cls)
    declared = Support(getattr(cls, "support"))
    out = AuditResult(target=name, declared=declared)
    for level in LEVELS:
        r = run_check(_at_level(cls, level), options.replace(database=False))
        out.results[level] = r
        if not r.ok:
            break
    safe = out.safe
    where = f"{getattr(cls, '__qualname__', name)}.support"
    if declared > safe:
        broken = next(lv for lv in LEVELS if not out.results[lv].ok)
        first = out.results[broken].errors[0]
        out.findings.append(Finding(
            kind=FindingKind.SUPPORT_MISMATCH, target=name, where=where,
            message=(f"declared {declared.name}, but {broken.name} batches break ({first.kind.value}: {first.message})"
                     + (f"; the highest safe level is {safe.name}: declare support = Support.{safe.name}"
                        if safe > Support.NEVER else "; no level is safe")),
            details={"declared": declared.name, "safe": safe.name, "breaks": broken.name},
        ))
    elif safe > declared:
        r = out.results[safe]
        out.findings.append(Finding(
            kind=FindingKind.SUPPORT_MISMATCH, target=name, where=where, severity="info",
            message=f"declared {declared.name}, but {safe.name} also passes ({r.examples} examples): could declare "
                    f"{safe.name}",
            details={"declared": declared.name, "safe": safe.name},
        ))
    out.seconds = time.perf_counter() - t0
    return out

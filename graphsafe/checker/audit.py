"""Which batches can one captured graph of a target safely serve?  The support-level audit.

Serving engines ask each attention backend how far its CUDA graphs can be trusted (``Support``:
single-token decode, uniform batches, any mix), and those levels are declared by hand.  An audit
checks the target on every *batch kind* under every *capture policy* the engines use, one check per
cell with the checker's own machinery, and compares the highest safe level with the declared one::

    batch kind          level                         batches
    decode              UNIFORM_SINGLE_TOKEN_DECODE   every request one query token
    uniform q=2..4      UNIFORM_BATCH                 every request 1 + k tokens (speculative decoding)
    mixed               ALWAYS                        prefill and decode mixed, padded

A level is safe when every batch kind it serves is safe under every capture policy audited.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..contract import CaptureSpec, Support
from ..errors import ContractError, UsageError
from ..findings import CheckResult, Finding, FindingKind
from .api import run_check
from .options import CheckOptions
from .targets import resolve_target, validate_target

__all__ = ["audit", "AuditResult", "Cell", "batch_kinds", "AUDIT_CAPTURE"]

#: the capture policies an audit runs each batch kind under, unless told otherwise
AUDIT_CAPTURE = ("worst", "minimal")
_UNIFORM_K = (1, 2, 3)  # speculative tokens: query length 1 + k


@dataclass(frozen=True)
class BatchKind:
    """One row of the audit: a name, the level whose graphs serve it, and the spec it is checked with."""

    name: str
    level: Support
    spec: CaptureSpec


def batch_kinds(spec: CaptureSpec) -> list[BatchKind]:
    """The rows for a target's spec: decode, uniform q = 1 + k (k = 1..3, as the sequence length allows),
    and mixed prefill/decode (query lengths up to 4 or the spec's own)."""
    rows = [BatchKind("decode", Support.UNIFORM_SINGLE_TOKEN_DECODE, dataclasses.replace(spec, max_query_len=1))]
    for k in _UNIFORM_K:
        if 1 + k <= spec.max_seq_len:
            rows.append(
                BatchKind(f"uniform q={1 + k}", Support.UNIFORM_BATCH, dataclasses.replace(spec, max_query_len=1 + k))
            )
    mixed_q = min(max(spec.max_query_len, 1 + _UNIFORM_K[-1]), spec.max_seq_len)
    rows.append(BatchKind("mixed", Support.ALWAYS, dataclasses.replace(spec, max_query_len=mixed_q)))
    return rows


@dataclass
class Cell:
    """One batch kind under one capture policy: the check's verdict and its first finding."""

    kind: str
    level: Support
    capture: str
    result: CheckResult

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def first(self) -> Finding | None:
        return self.result.errors[0] if self.result.errors else None


@dataclass
class AuditResult:
    """The audit's table (batch kind x capture policy), the highest safe level, the declared one, the verdict."""

    target: str
    declared: Support
    captures: tuple[str, ...]
    cells: list[Cell] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def safe_for(self, capture: str | None = None) -> Support:
        """The highest level all of whose batch kinds passed (under ``capture``, or every policy)."""
        best = Support.NEVER
        for level in (Support.UNIFORM_SINGLE_TOKEN_DECODE, Support.UNIFORM_BATCH, Support.ALWAYS):
            cells = [c for c in self.cells if c.level == level and (capture is None or c.capture == capture)]
            if not cells or not all(c.ok for c in cells):
                break
            best = level
        return best

    @property
    def safe(self) -> Support:
        """The highest level safe under every capture policy audited."""
        return self.safe_for(None)

    @property
    def ok(self) -> bool:
        """True unless the declared level is higher than the safe one."""
        return not [f for f in self.findings if f.severity == "error"]

    @property
    def checks(self) -> int:
        return len(self.cells)

    @property
    def examples(self) -> int:
        return sum(c.result.calls for c in self.cells)

    def table(self) -> list[dict[str, Any]]:
        """One row per batch kind: its level, and per capture policy the verdict (``ok`` or the first
        finding's kind) with that finding's message."""
        rows: dict[str, dict[str, Any]] = {}
        for c in self.cells:
            row = rows.setdefault(c.kind, {"batch kind": c.kind, "level": c.level.name, "cells": {}})
            f = c.first
            row["cells"][c.capture] = {
                "verdict": "ok" if f is None else f.kind.value,
                "finding": "" if f is None else f.message,
                "examples": c.result.calls,
            }
        return list(rows.values())

    def summary(self) -> str:
        lines = [
            f"{self.target}: declared Support.{self.declared.name}, highest safe Support.{self.safe.name} "
            f"({self.checks} checks, {self.examples} examples, {self.seconds:.1f}s)"
        ]
        lines += [f"  {f.severity}: {f.message}" for f in self.findings]
        return "\n".join(lines)


def audit(
    target: Any,
    options: CheckOptions = CheckOptions(),
    *,
    capture: tuple[str, ...] = AUDIT_CAPTURE,
    run_cell: Callable[[CheckOptions], CheckResult] | None = None,
) -> AuditResult:
    """Check ``target`` on every batch kind under every capture policy in ``capture``, and compare the highest
    safe level with the declared one.

    ``options`` apply to every cell (examples, engine, ...); each cell is ``run_cell(cell options)``
    (default: :func:`run_check` here; the front end passes one that isolates and times out).  The
    result's findings hold a ``support-mismatch``: an error when the declared level is higher than the
    highest safe one (naming the batch kind and finding that break it), info when a higher level is safe.

    Example::

        r = graphsafe.audit("flex", engine="emulate", examples=20)
        r.safe, r.declared   # (Support.ALWAYS, Support.ALWAYS)
    """
    t0 = time.perf_counter()
    cls, name = resolve_target(target)
    validate_target(cls)
    declared = options.support_for(cls)
    if not capture:
        raise UsageError("audit: name at least one capture policy")
    run_one = run_cell or (lambda opts: run_check(cls, opts))
    out = AuditResult(target=name, declared=declared, captures=tuple(capture))
    for kind in batch_kinds(options.spec_for(cls)):
        for policy in capture:
            cell = options.replace(spec=kind.spec, support=kind.level, capture=policy, database=False)
            try:
                result = run_one(cell)
            except ContractError as e:
                if kind.level <= declared:
                    raise  # batches the target says it serves: a real contract error
                result = _cannot_serve(name, cell, kind, e)
            out.cells.append(Cell(kind.name, kind.level, policy, result))
    out.findings = _verdict(out, name, getattr(cls, "__qualname__", name))
    out.seconds = time.perf_counter() - t0
    return out


def _cannot_serve(name: str, cell: CheckOptions, kind: BatchKind, error: ContractError) -> CheckResult:
    """A cell above the declared level whose batches the target cannot even run (its contract breaks,
    e.g. ``live()`` assumes one query token): that level is not safe."""
    finding = Finding(
        kind=FindingKind.TARGET_ERROR,
        target=name,
        message=f"cannot run {kind.name} batches (above its declared level): {error}",
    )
    return CheckResult(
        target=name, engine=str(cell.engine), spec=kind.spec, probes=(), support=kind.level.name, findings=[finding]
    )


def _verdict(out: AuditResult, name: str, qualname: str) -> list[Finding]:
    safe, declared = out.safe, out.declared
    where = f"{qualname}.support"
    if declared > safe:
        broken = next(c for c in out.cells if not c.ok and c.level <= declared)
        f = broken.first
        assert f is not None  # a cell that is not ok has an error finding
        return [
            Finding(
                kind=FindingKind.SUPPORT_MISMATCH,
                target=name,
                where=where,
                message=(
                    f"declared {declared.name}, but {broken.kind} batches break under {broken.capture} capture "
                    f"({f.kind.value}: {f.message})"
                    + (
                        f"; the highest safe level is {safe.name}: declare support = Support.{safe.name}"
                        if safe > Support.NEVER
                        else "; no level is safe"
                    )
                ),
                details={
                    "declared": declared.name,
                    "safe": safe.name,
                    "breaks": broken.kind,
                    "capture": broken.capture,
                },
                cause=f"line:{where}",
            )
        ]
    if safe > declared:
        examples = sum(c.result.calls for c in out.cells if c.level <= safe)
        return [
            Finding(
                kind=FindingKind.SUPPORT_MISMATCH,
                target=name,
                where=where,
                severity="info",
                message=f"declared {declared.name}, but {safe.name} also passes ({examples} examples): could declare "
                f"{safe.name}",
                details={"declared": declared.name, "safe": safe.name, "examples": examples},
            )
        ]
    return []

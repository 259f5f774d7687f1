"""What the command line prints: the header before a check, a progress bar, the verdict table, each finding."""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm import tqdm

from ..checker import CheckOptions, Progress
from ..checker.audit import AuditResult
from ..checker.targets import declared_support
from ..errors import GraphsafeError, TargetFailure, TargetTimeout
from ..findings import CheckResult

__all__ = [
    "OTHER",
    "NOT_REACHED",
    "header",
    "ProgressBar",
    "print_findings",
    "failed_cells",
    "cells",
    "table",
    "print_audit",
]

OTHER = "other"
NOT_REACHED = "not reached"


def header(name: str, cls: type, check: CheckOptions) -> str:
    """What is about to be checked: support level, spec, capture policies and examples."""
    spec = check.spec_for(cls)
    level = declared_support(cls)
    support = getattr(level, "name", None) or "UNIFORM_SINGLE_TOKEN_DECODE (not set)"
    if getattr(level, "resolved_when_checked", False):
        support = f"<{level.describe}>"
    return (
        f"checking {name} at Support.{support}, CaptureSpec(max_reqs={spec.max_reqs}, max_query_len="
        f"{spec.max_query_len}, max_seq_len={spec.max_seq_len}, block_size={spec.block_size}), capture "
        f"{','.join(p.name for p in check.policies)}, {check.examples} examples"
    )


class ProgressBar:
    """A check's progress on stderr when it is a terminal (tqdm), nothing otherwise: examples run of the
    planned ones, the capture phase, the stage of its search (searching, shrinking) and the finding kinds
    so far.  The line appears once the check has run ``delay`` seconds: a quick check prints none."""

    #: seconds before the line appears
    DELAY_S = 3.0

    def __init__(self, name: str, delay: float | None = None) -> None:
        self.bar: tqdm | None = None
        self.started = 0.0
        self.name = name
        self.delay = self.DELAY_S if delay is None else delay

    def __enter__(self) -> ProgressBar:
        return self

    def update(self, p: Progress) -> None:
        if not sys.stderr.isatty():
            return
        if self.bar is None:
            self.started = time.monotonic()
            self.bar = tqdm(
                total=p.planned, desc=self.name, unit="example", leave=False, file=sys.stderr, delay=self.delay
            )
        self.bar.total = max(self.bar.total or 0, p.examples)
        self.bar.set_postfix_str(f"{p.phase} capture, {p.stage}: {', '.join(p.kinds) or 'no finding'}", refresh=False)
        self.bar.update(p.examples - self.bar.n)
        if time.monotonic() - self.started >= self.delay:
            self.bar.refresh()  # (update() alone redraws at most every 0.1 s: the stage would lag)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.close()


def print_findings(results) -> None:
    for result in results:
        if result.findings or result.notes:
            print()
            print(result.header)
        for f in result.findings:
            print()
            print(f"{result.target}: {f.kind.value}" + (" (info)" if f.severity != "error" else ""))
            print(f.summary())
            print(f"  fix: {f.fix}")
        for n in result.notes:
            print(f"note ({result.target}): {n}")


def failed_cells(e: GraphsafeError, columns: list[str]) -> dict[str, str]:
    if isinstance(e, TargetTimeout):
        mark = "TIMEOUT"
    elif isinstance(e, TargetFailure):
        mark = "CRASH"
    else:
        mark = "ERROR"
    return {c: mark if c == OTHER else "-" for c in columns}


def cells(result: CheckResult, columns: list[str]) -> dict[str, str]:
    """One cell per probe column: the finding it made, ``ok`` when the search ran through, else
    ``not reached`` (an earlier finding ended the search) or ``-`` (nothing ran)."""
    ran = result.examples > 0 or not result.findings
    complete = not result.errors
    cells = {c: ("ok" if complete else NOT_REACHED) if ran else "-" for c in columns}
    for f in result.findings:
        col = f.probe if f.probe in columns else (f.kind.value if f.kind.value in columns else OTHER)
        text = f.kind.value + (" (info)" if f.severity != "error" else "")
        prev = cells[col]
        cells[col] = text if prev in ("ok", "-", NOT_REACHED) else f"{prev}, {text}"
    if not complete and cells[OTHER] == NOT_REACHED:
        cells[OTHER] = "-"
    return cells


def table(rows: list[tuple[str, dict[str, str]]], columns: list[str], first: str = "target") -> str:
    head = [first] + columns
    body = [[name] + [cells[c] for c in columns] for name, cells in rows]
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    fmt = lambda r: "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in body])


def print_audit(result: AuditResult) -> None:
    """The audit's table (batch kind x capture policy), the verdict and its cost."""
    head = ["batch kind", "level"] + [f"{c} capture" for c in result.captures]
    body = []
    for row in result.table():
        body.append(
            [row["batch kind"], row["level"]] + [row["cells"].get(c, {}).get("verdict", "-") for c in result.captures]
        )
    print()
    print(table([(r[0], dict(zip(head[1:], r[1:]))) for r in body], head[1:], first=head[0]))
    print(result.summary())
    for row in result.table():
        for c, cell in row["cells"].items():
            if cell["verdict"] != "ok":
                print(f"  {row['batch kind']} under {c} capture: {cell['verdict']}: {cell['finding']}")

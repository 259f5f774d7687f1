"""An audit's table in the report folder: ``<root>/<target>/audit.md`` and ``audit.json``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..checker.audit import AuditResult
from . import jsonio
from .paths import target_slug

__all__ = ["audit_data", "audit_markdown", "write_audit"]


def audit_data(result: AuditResult) -> dict[str, Any]:
    """The audit as plain JSON data."""
    return jsonio.plain(
        {
            "target": result.target,
            "declared": result.declared.name,
            "safe": result.safe.name,
            "safe_by_capture": {c: result.safe_for(c).name for c in result.captures},
            "ok": result.ok,
            "captures": list(result.captures),
            "table": result.table(),
            "findings": [{"severity": f.severity, "message": f.message, "where": f.where} for f in result.findings],
            "cost": {"checks": result.checks, "examples": result.examples, "seconds": round(result.seconds, 1)},
        }
    )


def audit_markdown(result: AuditResult) -> str:
    """The audit as a Markdown table: one row per batch kind, one column per capture policy."""
    head = ["batch kind", "level"] + [f"{c} capture" for c in result.captures]
    lines = [
        f"# Support audit: {result.target}",
        "",
        f"Declared `Support.{result.declared.name}`; highest safe `Support.{result.safe.name}` "
        f"({result.checks} checks, {result.examples} examples, {result.seconds:.1f} s).",
        "",
    ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in result.table():
        cells = []
        for c in result.captures:
            cell = row["cells"].get(c)
            if cell is None:
                cells.append("-")
            elif cell["verdict"] == "ok":
                cells.append(f"ok ({cell['examples']} examples)")
            else:
                cells.append(f"**{cell['verdict']}**: {cell['finding']}".replace("|", "\\|"))
        lines.append("| " + " | ".join([row["batch kind"], row["level"], *cells]) + " |")
    if result.findings:
        lines += [""] + [f"- {f.severity}: {f.message}" for f in result.findings]
    return "\n".join(lines) + "\n"


def write_audit(result: AuditResult, root: str | os.PathLike) -> Path:
    """Write ``audit.md`` and ``audit.json`` under ``root/<target>/``; return that directory."""
    d = Path(root) / target_slug(result.target)
    d.mkdir(parents=True, exist_ok=True)
    for name, text in (("audit.json", jsonio.dumps(audit_data(result))), ("audit.md", audit_markdown(result))):
        tmp = d / f".{name}.tmp{os.getpid()}"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, d / name)  # whole or not at all
    return d

"""Finding reports: one directory per finding, written atomically.

Layout::

    <root>/<target slug>/<kind>-<short hash>/
        report.md      what, where, capture, shrunk steps, differences, environment, fix, how to rerun
        finding.json   the same, machine-readable ("schema_version": 1); load_finding() reads it back
        repro.py       standalone replay: exit 1 while the finding reproduces, 0 once fixed, 3 if the target fails
        diff.png       heatmap of |graph - eager| over the live output rows (or the differing static state)

Public API::

    path = graphsafe.reports.write_report(finding, "reports/")   # -> Path of the directory
    f = graphsafe.reports.load_finding(path)                      # -> Finding (JSON only, never unpickles)
    graphsafe.reports.report_path(finding, "reports/")            # where write_report would write
    graphsafe.reports.repro_main(path, engine="emulate")          # what `graphsafe repro PATH` runs -> exit code
    graphsafe.reports.prune_stale(result, "reports/")             # after a check: drop its fixed bugs' reports

Overwrite policy: the directory name comes from the finding's key
``(target, kind, where)``, so writing the same finding again *replaces* its
report atomically (the newest run wins: current environment, newest shrunk
steps), unless the report in place says the same once volatile parts (timings,
addresses, versions, absolute paths) are ignored: then no file is touched.
Different keys never share a directory.  Writes are all-or-nothing (see
:mod:`graphsafe.reports.atomic`); :mod:`graphsafe.reports.lifecycle` says what
counts as the same report and when a check removes a report.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..findings import Finding
from . import atomic, environment, heatmap, jsonio, lifecycle, markdown, repro
from .jsonio import SCHEMA_VERSION, load_finding
from .lifecycle import prune_stale
from .paths import REPORT_FILES, display_path, report_path, target_slug
from .repro import repro_main

__all__ = [
    "write_report",
    "load_finding",
    "report_path",
    "repro_main",
    "report_data",
    "prune_stale",
    "SCHEMA_VERSION",
    "REPORT_FILES",
    "target_slug",
]


def _warnings(f: Finding, hints: dict) -> list[str]:
    out = []
    if "<locals>" in f.target:
        out.append(
            f"the target {f.target} is defined inside a function, so repro.py cannot import it; "
            "move the class to module level"
        )
    elif f.target.startswith("__main__:") and not hints.get("target_file"):
        out.append(
            f"the target {f.target} was defined in an interactive session, so repro.py cannot import "
            "it; move the class into a module"
        )
    if f.spec is None:
        out.append("the capture spec was not recorded; the repro uses the target's default spec")
    if not f.engine:
        out.append("the engine was not recorded; the repro uses engine 'auto'")
    return out


def report_data(finding: Finding) -> dict[str, Any]:
    """Everything ``finding.json`` holds for ``finding`` (plain JSON data, non-finite floats tagged)."""
    data = jsonio.finding_to_data(finding)
    plan = repro.capture_plan(finding)
    details = dict(data["details"])
    details.setdefault("capture_sizes", plan["capture_sizes"])
    data["details"] = details
    data.update(plan)
    hints = repro.import_hints(finding.target)
    data["target_import"] = hints
    data["environment"] = environment.environment()
    data["warnings"] = _warnings(finding, hints)
    data["files"] = {"report": "report.md", "finding": "finding.json", "repro": "repro.py", "heatmap": "diff.png"}
    data["repro"] = {
        "script": "python repro.py [--engine auto|cuda|emulate]",
        "cli": "graphsafe repro <report dir>",
        "exit_status": {"reproduced": 1, "fixed": 0, "cannot_run": 2, "target_failed": 3},
    }
    return jsonio.plain(data)


def write_report(finding: Finding, root: str | os.PathLike) -> Path:
    """Write ``finding``'s report under ``root`` and return its directory.

    The directory is ``report_path(finding, root)``; an existing report for the
    same key is replaced atomically, or left untouched when it says the same
    (:func:`lifecycle.same_report`).  Nothing is left under that name if
    writing fails part-way.
    """
    final = report_path(finding, root)
    final.parent.mkdir(parents=True, exist_ok=True)
    atomic.clean_stale(final.parent)
    data = report_data(finding)
    json_text = jsonio.dumps(data)
    decoded = jsonio.loads(json_text)  # markdown, script and picture are drawn from exactly what the JSON says
    hm = decoded.get("heatmap")
    shown = display_path(final)  # report.md and repro.py name the directory as the user would type it
    with atomic.staged_directory(final, keep=lambda tmp: lifecycle.same_report(tmp, final)) as tmp:
        atomic.write_file(tmp / jsonio.FILE_NAME, json_text)
        if heatmap.usable(hm):
            png = heatmap.render_png(hm, title=finding.kind.value)
        else:
            png = heatmap.render_unavailable_png(f"{finding.kind.value}: no replay output was compared")
        atomic.write_file(tmp / "diff.png", png)
        atomic.write_file(
            tmp / repro.SCRIPT_NAME,
            repro.render_script(repro.recipe_from_data(decoded), message=finding.message, report_dir=shown),
        )
        atomic.write_file(tmp / "report.md", markdown.render(decoded, report_dir=shown))
    return final

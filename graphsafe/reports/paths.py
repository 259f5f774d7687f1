"""Where a finding's report lives: ``<root>/<target slug>/<kind>-<hash>/``.

The hash is :attr:`Finding.short_hash`, taken from the finding's key
``(target, kind, where)``: the same key always maps to the same directory, and
different keys to different ones.  Should two keys share the 8-digit hash, the
second finding takes a 16-digit (then the full 40-digit) hash instead, decided
by the ``key`` recorded in the existing directory's ``finding.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from ..findings import Finding

__all__ = ["target_slug", "report_path", "display_path", "REPORT_FILES"]

REPORT_FILES = ("finding.json", "report.md", "repro.py", "diff.png")
_MAX_SLUG = 80


def target_slug(target: str) -> str:
    """A directory-safe name for ``target`` (``"pkg.mod:Class"`` -> ``"pkg.mod_Class"``)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", target or "").strip("._-")
    if not slug:
        return "unnamed-target"
    if len(slug) > _MAX_SLUG:
        digest = hashlib.sha1(target.encode()).hexdigest()[:8]
        slug = slug[: _MAX_SLUG - 9] + "-" + digest
    return slug


def _recorded_key(directory: Path) -> list | None:
    try:
        with open(directory / "finding.json", encoding="utf-8") as fh:
            key = json.load(fh).get("key")
        return list(key) if isinstance(key, list) else None
    except (OSError, ValueError, AttributeError):
        return None


def report_path(finding: Finding, root: str | os.PathLike) -> Path:
    """The directory ``write_report(finding, root)`` writes (it may not exist yet)."""
    full = hashlib.sha1("\0".join(finding.key).encode()).hexdigest()
    base = Path(root) / target_slug(finding.target)
    for digits in (8, 16, 40):
        h = finding.short_hash if digits == 8 else full[:digits]
        candidate = base / f"{finding.kind.value}-{h}"
        if not candidate.exists():
            return candidate
        recorded = _recorded_key(candidate)
        if recorded is None or recorded == list(finding.key):
            return candidate  # ours (or unreadable: ours to replace)
    return candidate


def display_path(path: str | os.PathLike) -> str:
    """``path`` as a report shows it: relative to the current directory when inside it, else absolute."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return str(path)
    return str(path) if rel == ".." or rel.startswith(".." + os.sep) else rel

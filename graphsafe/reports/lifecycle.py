"""Reports that stay true: an equivalent rewrite changes no file, a fixed bug's report goes.

* :func:`same_report`: a freshly written report says the same as the one in place when every file
  matches once the volatile parts are ignored: the search effort (``seconds_to_find``,
  ``examples_to_find``: "Found after N example(s) (T s)"), memory addresses (``0x7f...``), the
  environment section and graphsafe's version, and absolute paths.  :func:`graphsafe.reports.write_report`
  then leaves the existing files untouched, so re-running a check does not churn committed sample reports.
* :func:`prune_stale`: after a check of target T on engine E, T's reports made on E, of the kinds the check
  looked for, that this run did not (re)write are replayed from their recorded steps; those that now
  pass are removed, each with a note on the result.  A search not finding a bug again is no proof that it
  is fixed (which examples a search meets depends on Hypothesis' example database, its version, the
  machine), so a report whose steps still fail stays, brought up to date from the replay when that finds
  the same bug at the same place (a moved line, a reworded message); and a report made on another engine
  is not this run's to judge (the CUDA engine and the emulator need not find the same set of bugs).
  One cause, one report: an old report of the kind and cause (:func:`~graphsafe.checker.causes.cause_key`)
  of a report this run wrote is replaced by it, without a replay, even when the two name different places
  (one host decision froze two values, and each search met the other first); so is one whose replay
  gives only errors of such a kind and cause (the report named the cause as an older graphsafe did).

Example::

    result = run_check("flex:fresh_metadata", options)
    for f in result.errors:
        f.report_dir = str(write_report(f, "reports"))
    prune_stale(result, "reports")   # -> [Path("reports/flex_fresh_metadata/lazy-init-...")] once fixed
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ..diagnosis import PROBES
from ..diagnosis.causes import cause_key
from ..findings import CheckResult, Finding, FindingKind
from . import _script, atomic, jsonio, repro
from .paths import display_path, target_slug

__all__ = ["VOLATILE_KEYS", "normalised", "same_report", "reported_kinds", "replay_errors", "prune_stale"]

#: finding.json keys whose values change from run to run without the finding changing (the search
#: effort too: a rerun replays the saved failing example from Hypothesis' database first)
VOLATILE_KEYS = ("environment", "seconds_to_find", "examples_to_find")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
_ABSOLUTE_PATH = re.compile(r"(?<![\w./~-])/(?:[\w.+~-]+/)*[\w.+~-]+")
_MD_ENVIRONMENT = re.compile(r"^## Environment\n.*?(?=^## )", re.S | re.M)
_MD_FOUND_AFTER = re.compile(r"^\*\*Found after:\*\* .*$", re.M)
_VERSION_LINE = re.compile(r"Written by graphsafe \S+")


def _mask(text: str) -> str:
    return _ABSOLUTE_PATH.sub("<path>", _ADDRESS.sub("0x?", text))


def normalised(name: str, raw: bytes) -> bytes:
    """A report file's bytes without the parts that vary between equivalent runs (see the module docstring)."""
    if not name.endswith((".json", ".md", ".py")):
        return raw  # diff.png: the same data draws the same bytes
    text = raw.decode("utf-8", errors="replace")
    if name.endswith(".json"):
        try:
            data = jsonio.loads(text)
        except json.JSONDecodeError:
            return raw
        if isinstance(data, dict):
            text = jsonio.dumps({k: v for k, v in data.items() if k not in VOLATILE_KEYS})
    elif name.endswith(".md"):
        text = _MD_FOUND_AFTER.sub("", _MD_ENVIRONMENT.sub("", text))
    else:
        text = _VERSION_LINE.sub("Written by graphsafe", text)
    return _mask(text).encode("utf-8")


def _files(directory: Path) -> dict[str, Path]:
    return {p.name: p for p in directory.iterdir()}


def same_report(new: Path, existing: Path) -> bool:
    """True when the report directory ``existing`` holds the same files as ``new``, volatile parts aside."""
    try:
        if not existing.is_dir():
            return False
        a, b = _files(new), _files(existing)
        if a.keys() != b.keys() or not all(p.is_file() for p in b.values()):
            return False
        return all(normalised(n, a[n].read_bytes()) == normalised(n, b[n].read_bytes()) for n in a)
    except OSError:
        return False


def reported_kinds(result: CheckResult) -> set[str]:
    """The finding kinds ``result``'s check looked for: its probes; with every probe, also the kinds
    no probe names (a replay mismatch, the target's own error).  Empty when it never searched."""
    if not result.calls:  # the capture failed or the target raised before any example: nothing was looked for
        return set()
    kinds = set(result.probes)
    if kinds >= set(PROBES):
        kinds |= {FindingKind.REPLAY_MISMATCH.value, FindingKind.TARGET_ERROR.value}
    return kinds


def replay_errors(data: dict[str, Any], target: Any, engine: str) -> list[Finding]:
    """The error findings that the report ``data`` (its ``finding.json``) still gives: its recorded
    capture and steps replayed on ``engine`` in this process with ``target`` (a class or its name), as
    its ``repro.py`` would.  Empty once the bug is fixed.  Raises whatever stops the replay itself."""
    return _script.replay(repro.recipe_from_data(data), engine, target).errors


def _refresh(data: dict[str, Any], still: list[Finding], root: str | os.PathLike) -> None:
    """Rewrite a kept report from its replay when the replay finds the same (target, kind, where): what
    the report says then follows the code (a moved line, a reworded message); its search effort stays."""
    from . import write_report  # here, not at the top: graphsafe/reports/__init__.py imports this module

    for f in still:
        if list(f.key) == data.get("key"):
            f.examples_to_find = data.get("examples_to_find", f.examples_to_find)
            f.seconds_to_find = data.get("seconds_to_find", f.seconds_to_find)
            write_report(f, root)  # (untouched when it says the same: same_report)
            return


def _candidates(result: CheckResult, base: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Report directories under ``base`` that ``result``'s check looked for and did not (re)write."""
    kinds = reported_kinds(result)
    written = {Path(f.report_dir).resolve() for f in result.errors if f.report_dir}
    found = []
    for entry in sorted(base.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir() or entry.resolve() in written:
            continue
        try:
            data = jsonio.read_data(entry)
        except (OSError, ValueError):
            continue  # not a graphsafe report (or not this version's): not ours to delete
        if data.get("target") != result.target or data.get("kind") not in kinds:
            continue
        if data.get("engine") != result.engine:
            continue  # another engine's report: this run cannot say whether that engine still finds it
        found.append((entry, data))
    return found


def _written_causes(result: CheckResult) -> dict[tuple[str, str], Path]:
    """(kind, cause key) -> report directory, for each error finding of ``result`` written to a report."""
    return {(f.kind.value, cause_key(f.cause)): Path(f.report_dir) for f in result.errors if f.report_dir and f.cause}


def _remove(entry: Path, shown: str, result: CheckResult) -> bool:
    try:
        atomic.remove(entry)
    except OSError as e:
        result.notes.append(f"stale report {shown} not removed: {e}")
        return False
    return True


def prune_stale(result: CheckResult, root: str | os.PathLike, target: Any = None) -> list[Path]:
    """Remove ``result.target``'s reports under ``root`` whose bug this check shows to be fixed.

    A candidate is a report directory whose ``finding.json`` names this target, this run's engine and
    a kind among :func:`reported_kinds`, and that no error finding of ``result`` was written to
    (``report_dir``).  A candidate of the kind and cause (:func:`cause_key`) of a report this run wrote
    goes, replaced by that report: one cause, one report.  Each other candidate is replayed
    (:func:`replay_errors`, with ``target``, default ``result.target``): it goes when its steps now
    pass, or when every error they still give has the kind and cause of a report this run wrote (the
    cause was named otherwise when the report was made); it stays when they still fail otherwise or
    cannot be replayed; one that still fails at the same place is rewritten from the replay where it
    says something new.  Each removal and each kept candidate adds a note to ``result.notes``; unreadable
    directories are left alone.  Removal is atomic (:func:`atomic.remove`).  Returns the directories removed.
    """
    base = Path(root) / target_slug(result.target)
    if not reported_kinds(result) or not base.is_dir():
        return []
    removed: list[Path] = []
    written = _written_causes(result)
    for entry, data in _candidates(result, base):
        shown = display_path(entry)
        replacement = written.get((str(data.get("kind")), cause_key(str(data.get("cause") or ""))))
        if replacement is not None:
            cause = f"{data['kind']} at {data['cause']}"
            why = f"replaced report {shown} by {display_path(replacement)}: the same cause ({cause})"
            if _remove(entry, shown, result):
                removed.append(entry)
                result.notes.append(why)
            continue
        try:
            still = replay_errors(data, result.target if target is None else target, result.engine)
        except Exception as e:  # noqa: BLE001 - a replay that cannot run judges nothing: the report stays
            why = (str(e).strip().splitlines() or [""])[0]
            result.notes.append(
                f"kept report {shown}: not found by this run, and its recorded steps could not be replayed "
                f"({type(e).__name__}: {why})"
            )
            continue
        covered = [w for f in still if (w := written.get((f.kind.value, cause_key(f.cause)))) is not None]
        if still and len(covered) == len(still):  # its bug is a cause this run reported (named anew since)
            if _remove(entry, shown, result):
                removed.append(entry)
                result.notes.append(
                    f"replaced report {shown} by {display_path(covered[0])}: its recorded steps still fail, with "
                    "the same cause"
                )
            continue
        if still:
            kinds = ", ".join(sorted({f.kind.value for f in still}))
            result.notes.append(
                f"kept report {shown}: not found by this run, but its recorded steps still fail ({kinds})"
            )
            try:
                _refresh(data, still, root)
            except OSError as e:
                result.notes.append(f"kept report {shown} not brought up to date: {e}")
            continue
        if not _remove(entry, shown, result):
            continue
        removed.append(entry)
        result.notes.append(f"removed stale report {shown}: not found by this run, and its recorded steps now pass")
    if removed:
        with contextlib.suppress(OSError):
            base.rmdir()  # the target's folder, once it holds no report
    return removed

"""``finding.json``: a Finding as plain JSON, and back.

Plain JSON only (``json.dumps(allow_nan=False)``): no pickles, nothing that
runs code when loaded.  Non-finite floats (an infinite difference, a NaN the
graph read) are written as ``{"$float": "inf"}`` / ``{"$float": "nan"}`` and
read back as floats.  Tuples become lists; objects JSON cannot hold become
their ``repr()`` string.

``load_finding`` rejects a file whose ``schema_version`` is not
:data:`SCHEMA_VERSION` with a ``ValueError`` that names both versions.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
from pathlib import Path
from typing import Any

from ..contract import Batch, CaptureSpec
from ..errors import UsageError
from ..findings import EXPLANATIONS, FIXES, Finding, FindingKind, Mismatch

__all__ = [
    "SCHEMA_VERSION",
    "FILE_NAME",
    "plain",
    "pretty",
    "dumps",
    "loads",
    "finding_to_data",
    "finding_from_data",
    "read_data",
    "load_finding",
    "json_path",
]

SCHEMA_VERSION = 1
FILE_NAME = "finding.json"
_FLOAT_TAG = "$float"

# the Finding fields every finding.json holds, in order
_REQUIRED = ("schema_version", "kind", "message", "target", "where")


def plain(value: Any) -> Any:
    """``value`` as JSON-safe plain data (dicts with str keys, lists, str, int, finite float, bool, None)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return {_FLOAT_TAG: "nan"}
        if math.isinf(value):
            return {_FLOAT_TAG: "inf" if value > 0 else "-inf"}
        return float(value)
    if isinstance(value, (Batch,)):
        return plain(value.to_dict())
    if isinstance(value, Mismatch):
        return plain(value.to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=repr)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    tolist = getattr(value, "tolist", None)  # numpy / torch scalars and small tensors
    numel = getattr(value, "numel", None)
    size = numel() if callable(numel) else getattr(value, "size", 0)
    if callable(tolist) and isinstance(size, int) and size <= 64:
        try:
            return plain(tolist())
        except Exception:  # noqa: BLE001
            pass
    return repr(value)


def _hook(d: dict) -> Any:
    if len(d) == 1 and _FLOAT_TAG in d and isinstance(d[_FLOAT_TAG], str):
        return float(d[_FLOAT_TAG])
    return d


def _scalar(v: Any) -> bool:
    return not isinstance(v, (dict, list))


def pretty(value: Any, *, ensure_ascii: bool = False, _indent: int = 0) -> str:
    """Strict, indented JSON for plain data; lists of scalars (and short lists of them) stay on one line."""
    pad, inner = " " * _indent, " " * (_indent + 2)

    def one(v: Any) -> str:
        return json.dumps(v, allow_nan=False, ensure_ascii=ensure_ascii)

    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [
            f"{inner}{one(k)}: {pretty(v, ensure_ascii=ensure_ascii, _indent=_indent + 2)}" for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        flat = all(_scalar(v) or (isinstance(v, list) and all(_scalar(x) for x in v)) for v in value)
        if flat:
            text = one(value)
            if len(text) <= 100 or all(_scalar(v) for v in value):
                return text
        if not value:
            return "[]"
        items = [inner + pretty(v, ensure_ascii=ensure_ascii, _indent=_indent + 2) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return one(value)


def dumps(data: dict) -> str:
    """Strict JSON text (``allow_nan=False``), indented, keys in insertion order."""
    return pretty(plain(data)) + "\n"


def loads(text: str) -> Any:
    """Parse JSON written by :func:`dumps` (tagged non-finite floats become floats again)."""
    return json.loads(text, object_hook=_hook)


# -- Finding <-> dict ---------------------------------------------------------------------
# Finding fields written explicitly below; any other field is copied as plain data
_HANDLED = {
    "kind",
    "message",
    "target",
    "where",
    "probe",
    "engine",
    "spec",
    "capture_size",
    "capture_batch",
    "batches",
    "step",
    "mismatches",
    "details",
    "error",
    "severity",
    "examples_to_find",
    "heatmap",
    "report_dir",
}


def finding_to_data(f: Finding) -> dict[str, Any]:
    """The Finding's own fields as plain data (``write_report`` adds environment and repro sections)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": f.kind.value,
        "severity": f.severity,
        "message": f.message,
        "target": f.target,
        "where": f.where,
        "probe": f.probe,
        "engine": f.engine,
        "key": list(f.key),
        "short_hash": f.short_hash,
        "explanation": EXPLANATIONS[f.kind],
        "fix": FIXES[f.kind],
        "spec": f.spec.to_dict() if f.spec is not None else None,
        "capture_size": int(f.capture_size),
        "capture_batch": f.capture_batch.to_dict() if f.capture_batch is not None else None,
        "batches": [b.to_dict() for b in f.batches],
        "step": int(f.step),
        "max_abs": f.max_abs,
        "max_rel": f.max_rel,
        "mismatches": [m.to_dict() for m in f.mismatches],
        "details": plain(dict(f.details)),
        "error": f.error,
        "examples_to_find": int(f.examples_to_find),
        "heatmap": plain(f.heatmap) if f.heatmap is not None else None,
        # any Finding field added later (e.g. seconds_to_find) travels as plain data
        **{fl.name: plain(getattr(f, fl.name)) for fl in dataclasses.fields(Finding) if fl.name not in _HANDLED},
    }


def finding_from_data(data: dict, *, report_dir: str = "") -> Finding:
    """Rebuild a :class:`Finding` from ``finding.json`` data (already schema-checked)."""
    try:
        kind = FindingKind(data["kind"])
    except ValueError:
        known = ", ".join(k.value for k in FindingKind)
        raise UsageError(f"finding.json: unknown kind {data['kind']!r}; known kinds: {known}") from None
    cb = data.get("capture_batch")
    extra = {
        fl.name: data[fl.name] for fl in dataclasses.fields(Finding) if fl.name not in _HANDLED and fl.name in data
    }
    return Finding(
        kind=kind,
        message=str(data.get("message", "")),
        target=str(data.get("target", "")),
        where=str(data.get("where", "")),
        probe=str(data.get("probe", "")),
        engine=str(data.get("engine", "")),
        spec=CaptureSpec.from_dict(data["spec"]) if data.get("spec") else None,
        capture_size=int(data.get("capture_size") or 0),
        capture_batch=Batch.from_dict(cb) if cb is not None else None,
        batches=[Batch.from_dict(b) for b in data.get("batches") or []],
        step=int(data.get("step", -1)),
        mismatches=[
            Mismatch(
                tensor=str(m["tensor"]),
                count=int(m["count"]),
                total=int(m["total"]),
                max_abs=float(m["max_abs"]),
                max_rel=float(m["max_rel"]),
                first=list(m.get("first") or []),
            )
            for m in data.get("mismatches") or []
        ],
        details=dict(data.get("details") or {}),
        error=str(data.get("error", "")),
        severity=str(data.get("severity", "error")),
        examples_to_find=int(data.get("examples_to_find") or 0),
        heatmap=data.get("heatmap"),
        report_dir=report_dir,
        **extra,
    )


# -- files --------------------------------------------------------------------------------
def json_path(path: str | os.PathLike) -> Path:
    """``finding.json`` for a report directory, ``finding.json`` itself, or a file beside it (``repro.py``)."""
    p = Path(path)
    if p.is_dir():
        return p / FILE_NAME
    if p.suffix == ".json":
        return p
    if p.is_file():
        return p.parent / FILE_NAME
    return p / FILE_NAME  # a report directory that does not exist: say so by its name


def read_data(path: str | os.PathLike) -> dict[str, Any]:
    """The validated data of a ``finding.json`` (``ValueError`` for anything but a schema-1 report)."""
    jp = json_path(path)
    try:
        text = jp.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"no graphsafe report at {path}: {jp} does not exist") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{jp} is not valid JSON (not UTF-8 text: {e}); graphsafe reports are plain JSON") from None
    try:
        data = loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{jp} is not valid JSON ({e}); graphsafe reports are plain JSON") from None
    if not isinstance(data, dict):
        raise UsageError(f"{jp} holds a JSON {type(data).__name__}, not a graphsafe finding object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UsageError(
            f"{jp} has schema_version {version!r}, but this graphsafe reads schema_version {SCHEMA_VERSION} "
            "only; rerun the check with this graphsafe to rewrite the report"
        )
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise UsageError(f"{jp} is missing {', '.join(missing)}: not a graphsafe finding")
    return data


def load_finding(path: str | os.PathLike) -> Finding:
    """The :class:`Finding` stored in a report (its directory or its ``finding.json``).

    Reads JSON only; never unpickles.  ``finding.report_dir`` is the report's directory.
    """
    jp = json_path(path)
    data = read_data(jp)
    return finding_from_data(data, report_dir=str(jp.parent))

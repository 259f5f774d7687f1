"""What crosses between a sandbox's parent and child: the target's name, the options, the result.

Requests are ``("check", CheckOptions, RunOptions, label, send progress?)`` and ``("cause", CheckOptions,
RunOptions, label, False, fault)`` (a failed replay's example, whose cause a fresh child decides); the child answers
with ``("progress", Progress)`` and ``("partial", <JSON text>)`` (the result so far, after each capture phase that
found something) while it works, then ``{"result": <JSON text>, "notes": [...], "broken_context": bool}`` or
``{"error": GraphsafeError, ...}``, all pickled by :mod:`multiprocessing`.  The result travels as plain JSON
(findings through :func:`graphsafe.reports.jsonio.finding_to_data`) so that no torch object crosses the pipe;
errors are graphsafe's own picklable ones (anything else becomes an :class:`~graphsafe.errors.InternalError` in the
child).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from typing import Any

from ...contract import CaptureSpec
from ...findings import CheckResult
from ...reports.jsonio import finding_from_data, finding_to_data, loads, plain

__all__ = ["target_ref", "result_to_text", "result_from_text"]


def target_ref(target: Any) -> tuple[str | None, bool, str]:
    """``(name the child can load, check the class rather than the name?, why not)`` for a target.

    A string is sent as is.  A class is sent as ``'module:qualname'`` when that imports back to
    the very same class; otherwise the name is None and the third item says why (the caller then
    runs the check in its own process).
    """
    if isinstance(target, str):
        return target, False, ""
    if not inspect.isclass(target):
        return None, False, f"a {type(target).__name__} is not a target class or name"
    mod, qual = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
    label = f"{mod}:{qual}"
    if "<locals>" in qual:
        return None, True, f"the target {label} is defined inside a function, so a sandbox process cannot import it"
    if mod in (None, "__main__", "__mp_main__", "builtins"):
        return (
            None,
            True,
            f"the target {label} is defined in the __main__ script, so a sandbox process cannot import it",
        )
    obj: Any = sys.modules.get(mod)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    if obj is not target:
        return (
            None,
            True,
            f"the target {label} does not import back under that name, so a sandbox process cannot load it",
        )
    # check(cls) names the result cls.name when the class has one, check("module:Class") by that string:
    # only then must the child pass the class itself
    return label, bool(getattr(target, "name", None)), ""


def result_to_text(result: CheckResult) -> str:
    """A :class:`~graphsafe.CheckResult` as strict JSON text."""
    out: dict[str, Any] = {}
    for fl in dataclasses.fields(CheckResult):
        v = getattr(result, fl.name)
        if fl.name == "spec":
            out["spec"] = v.to_dict() if v is not None else None
        elif fl.name == "findings":
            out["findings"] = [{"data": finding_to_data(f), "report_dir": f.report_dir} for f in v]
        else:
            out[fl.name] = plain(v)
    return json.dumps(plain(out), allow_nan=False)


def result_from_text(text: str) -> CheckResult:
    """Rebuild a :class:`~graphsafe.CheckResult` from :func:`result_to_text`'s text."""
    data = loads(text)
    kw: dict[str, Any] = {}
    names = {fl.name for fl in dataclasses.fields(CheckResult)}
    for k, v in data.items():
        if k not in names:
            continue
        if k == "spec":
            v = CaptureSpec.from_dict(v) if v is not None else None
        elif k == "findings":
            v = [finding_from_data(f["data"], report_dir=f.get("report_dir") or "") for f in v]
        elif k == "probes":
            v = tuple(v)
        elif k == "notes":
            v = list(v)
        kw[k] = v
    return CheckResult(**kw)

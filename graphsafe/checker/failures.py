"""How findings travel through a Hypothesis search: one exception class per finding kind and per symptom (Hypothesis
tells distinct failures apart by type, and shrinks each), and the findings collected back from what it raised."""

from __future__ import annotations

import re

from ..findings import Finding, FindingError, FindingKind

__all__ = ["error_class", "collect"]

_ERROR_CLASSES: dict[str, type] = {}


def error_class(label: FindingKind | str) -> type:
    """One FindingError subclass per finding kind, and per symptom (the tensor that differed first, which a search
    shrinks on): Hypothesis tells distinct failures apart by type."""
    name = ("Finding_" if isinstance(label, FindingKind) else "Symptom_") + re.sub(r"\W", "_", str(label))
    cls = _ERROR_CLASSES.get(name)
    if cls is None:
        cls = _ERROR_CLASSES[name] = type(name, (FindingError,), {})
    return cls


def collect(exc: BaseException, out: list[Finding]) -> bool:
    """Append the findings ``exc`` carries (a FindingError, a group of them, one in its cause chain) to ``out``;
    True when it carried any FindingError."""
    if isinstance(exc, FindingError):
        if isinstance(exc.finding, Finding):  # (a symptom whose shrunk example was no error: nothing to report)
            out.append(exc.finding)
        return True
    inner = getattr(exc, "exceptions", None)
    if inner:
        found = False
        for e in inner:
            found |= collect(e, out)
        return found
    if exc.__cause__ is not None and collect(exc.__cause__, out):
        return True
    return False

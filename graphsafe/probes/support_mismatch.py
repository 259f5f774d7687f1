"""support-mismatch: the declared Support level does not match what one graph can serve.

Opt-in (it runs the other probes again at neighbouring levels).  Loud when the
declared level breaks but a lower one passes (declare the lower one); an
info-level finding when the next level up also passes (the declaration is more
conservative than needed).
"""

from __future__ import annotations

from ..contract import Support
from ..findings import Finding, FindingKind

KIND = FindingKind.SUPPORT_MISMATCH


def _at_level(cls, level: Support) -> type:
    return type(cls.__name__, (cls,), {"support": level, "__module__": cls.__module__, "__qualname__": cls.__qualname__})


def run(cls, name, result, **kw) -> list[Finding]:
    from ..checker import check
    from . import DEFAULT_PROBES

    declared = Support(cls.support)
    kw = dict(kw)
    kw["probes"] = list(DEFAULT_PROBES)
    kw["database"] = False
    errors = [f for f in result.findings if f.severity == "error" and f.kind != KIND]
    if errors and declared > Support.UNIFORM_SINGLE_TOKEN_DECODE:
        for lower in range(declared - 1, Support.UNIFORM_SINGLE_TOKEN_DECODE - 1, -1):
            r = check(_at_level(cls, Support(lower)), **kw)
            if r.ok:
                return [Finding(
                    kind=KIND, target=name, where=f"{cls.__qualname__}.support",
                    message=(f"declared {declared.name} breaks ({', '.join(sorted(result.kinds))}), but "
                             f"{Support(lower).name} passes: declare support = Support.{Support(lower).name}"),
                    details={"declared": declared.name, "passes": Support(lower).name},
                )]
        return []
    if not errors and declared < Support.ALWAYS:
        higher = Support(declared + 1)
        r = check(_at_level(cls, higher), **kw)
        if r.ok:
            return [Finding(
                kind=KIND, target=name, severity="info", where=f"{cls.__qualname__}.support",
                message=f"declared {declared.name}, but {higher.name} also passes: the declaration is more conservative than needed",
                details={"declared": declared.name, "passes": higher.name},
            )]
    return []

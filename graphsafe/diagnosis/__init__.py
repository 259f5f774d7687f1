"""Diagnosis: why a step's replay differed from eager, decided once per failing example.

The registry of finding kinds (:data:`graphsafe.findings.KINDS`) says, for each kind, its stage and the probe
module that makes it; this package turns that into probes (``KIND``, ``STAGE`` and ``run(ctx) -> Finding | None``,
one module per kind in ``graphsafe/diagnosis/probes/``; probes never import each other).

A ``capture`` probe gets the :class:`~graphsafe.capture.context.CaptureContext` of a failed capture.  ``step``
probes run on every step, after ``prepare`` and before the replay, with the step's
:class:`~graphsafe.diagnosis.context.StepContext`.  ``diagnosis`` probes run, in the registry's order, only when
a step's replay differs from eager, after the repair experiment (:mod:`graphsafe.diagnosis.repair`): the first
that explains the difference names the finding; a difference none explains is named from the repair, else a
``replay-mismatch``.  Every probe runs whichever kinds a check reports, so that a difference is always
attributed to its cause; ``check(probes=...)`` only chooses which findings are reported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..findings import KINDS, Finding, FindingKind

__all__ = ["Probe", "PROBES", "STAGES", "at_stage", "resolve_probes"]

#: when probes run, in order
STAGES = ("capture", "step", "diagnosis")


@dataclass(frozen=True)
class Probe:
    """One probe module: its finding kind, stage, ``run(ctx)`` and one-line summary."""

    name: str
    kind: FindingKind
    stage: str
    run: Callable[[Any], Finding | None]
    summary: str


def _probe(kind: FindingKind) -> Probe:
    info = KINDS[kind]
    module = importlib.import_module(f"{__name__}.probes.{info.probe}")
    if module.KIND is not kind or module.STAGE != info.stage or info.stage not in STAGES:
        raise AssertionError(
            f"{module.__name__} must declare KIND={kind!r} and STAGE={info.stage!r} (one of {STAGES}), as "
            f"graphsafe.findings.KINDS says; it declares {module.KIND!r}, {module.STAGE!r}"
        )
    return Probe(kind.value, kind, info.stage, module.run, (module.__doc__ or kind.value).strip().splitlines()[0])


#: every probe by name, in the order probes of one stage run (the registry's order)
PROBES: dict[str, Probe] = {k.value: _probe(k) for k, info in KINDS.items() if info.probe}


def at_stage(stage: str) -> tuple[Probe, ...]:
    """The probes of ``stage``, in running order."""
    return tuple(p for p in PROBES.values() if p.stage == stage)


def resolve_probes(names: Iterable[str] | str | None) -> tuple[Probe, ...]:
    """Probe objects for names (``None`` or ``"all"``: every probe); :class:`UsageError` for an unknown one."""
    if names is None or names == "all":
        return tuple(PROBES.values())
    if isinstance(names, str):
        names = [names]
    out: list[Probe] = []
    for n in names:
        n = str(getattr(n, "value", n))
        if n == "all":
            out.extend(p for p in PROBES.values() if p not in out)
            continue
        if n not in PROBES:
            raise UsageError(f"unknown probe {n!r}; known probes: {', '.join(PROBES)}")
        if PROBES[n] not in out:
            out.append(PROBES[n])
    return tuple(out)

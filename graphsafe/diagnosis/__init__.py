"""Probes: one module per finding kind, each ``KIND``, ``STAGE`` and ``run(ctx) -> Finding | None``.

=========================  ==========================================  =========
kind                       detected in                                 stage
=========================  ==========================================  =========
capture-failure            ``diagnosis/probes/capture_failure.py``               capture
stale-pointer              ``diagnosis/probes/stale_pointer.py``                 step
nondeterministic-replay    ``diagnosis/probes/nondeterministic_replay.py``       step
lazy-init                  ``diagnosis/probes/lazy_init.py``                     diagnose
unpersisted-metadata       ``diagnosis/probes/unpersisted_metadata.py``          diagnose
frozen-host-value          ``diagnosis/probes/frozen_host_value.py``             diagnose
output-not-written         ``diagnosis/probes/output_not_written.py``            diagnose
stale-padding              ``diagnosis/probes/stale_padding.py``                 diagnose
=========================  ==========================================  =========

A ``capture`` probe gets the :class:`~graphsafe.capture.context.CaptureContext` of a failed
capture.  ``step`` probes run on every step, after ``prepare`` and before the replay, with the
step's :class:`~graphsafe.capture.context.StepContext`.  ``diagnose`` probes run, in the order
above, only when a step's replay differs from eager, and the first that explains the difference
names the finding; a difference none explains is a ``replay-mismatch``.  Every probe runs
whichever kinds a check reports, so that a difference is always attributed to its cause;
``check(probes=...)`` only chooses which findings are reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..findings import Finding, FindingKind
from .probes import (
    capture_failure,
    frozen_host_value,
    lazy_init,
    nondeterministic_replay,
    output_not_written,
    stale_padding,
    stale_pointer,
    unpersisted_metadata,
)

__all__ = ["Probe", "PROBES", "STAGES", "at_stage", "resolve_probes"]

#: when probes run, in order
STAGES = ("capture", "step", "diagnose")


@dataclass(frozen=True)
class Probe:
    """One probe module: its finding kind, stage, ``run(ctx)`` and one-line summary."""

    name: str
    kind: FindingKind
    stage: str
    run: Callable[[Any], Finding | None]
    summary: str


def _probe(module) -> Probe:
    if module.STAGE not in STAGES:
        raise AssertionError(f"{module.__name__}.STAGE must be one of {STAGES}, got {module.STAGE!r}")
    return Probe(module.KIND.value, module.KIND, module.STAGE, module.run, module.__doc__.strip().splitlines()[0])


#: every probe by name, in the order probes of one stage run
PROBES: dict[str, Probe] = {
    p.name: p
    for p in map(
        _probe,
        [
            capture_failure,
            stale_pointer,
            nondeterministic_replay,
            lazy_init,
            unpersisted_metadata,
            frozen_host_value,  # before output-not-written: a frozen launch count explains an unwritten output
            output_not_written,
            stale_padding,
        ],
    )
}


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

"""Probes: one module per finding kind, each runnable on its own.

=========================  ==========================================  =========
kind                       detected in                                 stage
=========================  ==========================================  =========
capture-failure            ``probes/capture_failure.py``               capture
stale-pointer              ``probes/stale_pointer.py``                 each step
nondeterministic-replay    ``probes/nondeterministic_replay.py``       each step
output-not-written         ``probes/output_not_written.py``            diagnosis
lazy-init                  ``probes/lazy_init.py``                     diagnosis
unpersisted-metadata       ``probes/unpersisted_metadata.py``          diagnosis
frozen-host-value          ``probes/frozen_host_value.py``             diagnosis
stale-padding              ``probes/stale_padding.py``                 diagnosis
support-mismatch           ``probes/support_mismatch.py``              meta
=========================  ==========================================  =========

*Step* probes run on every step; *diagnosis* probes run, in the order above,
only when a step's replay differs from eager, and the first that explains the
difference names the finding.  A difference none explains is reported as
``replay-mismatch``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..findings import FindingKind
from . import (
    capture_failure,
    frozen_host_value,
    lazy_init,
    nondeterministic_replay,
    output_not_written,
    stale_padding,
    stale_pointer,
    unpersisted_metadata,
)

__all__ = ["Probe", "PROBES", "DEFAULT_PROBES", "resolve_probes"]


@dataclass(frozen=True)
class Probe:
    name: str
    kind: FindingKind
    stage: str  # "capture", "step", "diagnose", "meta"
    run: Callable | None
    summary: str
    drawn_capture: bool = False  # also capture with drawn, smaller batches
    default: bool = True


def _p(module, stage, **kw) -> Probe:
    return Probe(module.KIND.value, module.KIND, stage, getattr(module, "run", None), module.__doc__.strip().splitlines()[0], **kw)


PROBES: dict[str, Probe] = {
    p.name: p
    for p in [
        _p(capture_failure, "capture"),
        _p(stale_pointer, "step", drawn_capture=True),
        _p(nondeterministic_replay, "step"),
        _p(output_not_written, "diagnose"),
        _p(lazy_init, "diagnose"),
        _p(unpersisted_metadata, "diagnose"),
        _p(frozen_host_value, "diagnose", drawn_capture=True),
        _p(stale_padding, "diagnose"),
        Probe("support-mismatch", FindingKind.SUPPORT_MISMATCH, "meta", None,
              "Is the declared Support level right? (runs the other probes at the neighbouring levels)", default=False),
    ]
}

DEFAULT_PROBES: tuple[str, ...] = tuple(n for n, p in PROBES.items() if p.default)


def resolve_probes(names) -> tuple[Probe, ...]:
    """Probe objects for names (``None`` or ``"all"`` gives the default set)."""
    if names is None or names == "all" or names == ["all"]:
        return tuple(PROBES[n] for n in DEFAULT_PROBES)
    if isinstance(names, str):
        names = [names]
    out = []
    for n in names:
        n = str(getattr(n, "value", n))
        if n not in PROBES:
            raise ValueError(f"unknown probe {n!r}; known probes: {', '.join(PROBES)}")
        out.append(PROBES[n])
    return tuple(out)

"""One check's options: a frozen dataclass built once at the top and passed down whole.

Front ends (command line, pytest plugin and fixture, :func:`graphsafe.check`) turn what the user
wrote into one of these in :mod:`graphsafe.frontend.options`; the defaults are
:mod:`graphsafe.defaults`."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from .. import defaults
from ..capture.compare import Tolerance
from ..capture.policies import CapturePolicy, resolve_capture
from ..contract import CaptureSpec, Support, Target
from ..diagnosis import resolve_probes
from ..engines import ENGINES, Engine
from ..errors import ContractError, UsageError

__all__ = ["CheckOptions", "DEFAULT_EXAMPLES", "DEFAULT_STEPS"]

#: examples per check when none is asked for (:mod:`graphsafe.defaults`; a front end's profile sets its own)
DEFAULT_EXAMPLES = defaults.EXAMPLES
#: most batches in one drawn step sequence (:mod:`graphsafe.defaults`)
DEFAULT_STEPS = defaults.STEPS


@dataclass(frozen=True)
class CheckOptions:
    """What one check does.  Every field is validated on construction (:class:`UsageError`).

    * ``spec``: the capture spec (None: the target's ``default_spec``, else ``CaptureSpec()``);
    * ``engine``: ``"auto"``, ``"cuda"``, ``"emulate"`` or an :class:`~graphsafe.engines.Engine`;
    * ``examples``: Hypothesis examples; ``steps``: most batches per example;
    * ``capture_sizes``: graph sizes to capture (None: the spec's);
    * ``probes``: finding kinds to report (None: all);
    * ``capture``: how graphs are captured: ``"explore"`` (worst-case, ascending, minimal and drawn batches,
      each a phase of the check), a policy name or names, or a function ``size -> Batch`` returning the
      engine's own capture batch (:mod:`graphsafe.capture.policies`); None (the default): the target's
      ``engine_capture`` (an engine's own backends capture as the engine does), else ``"explore"``;
    * ``support``: check at this :class:`~graphsafe.Support` level instead of the target's own (an audit);
    * ``tolerance``: how close graph and eager must be;
    * ``seed``: Hypothesis seed (None: Hypothesis decides); ``device``: e.g. ``"cuda:1"``;
    * ``database``: Hypothesis example database: a directory or a ``redis://`` URL, ``False`` for none,
      None for ``$GRAPHSAFE_DB``, else ``.hypothesis/graphsafe`` (:mod:`graphsafe.checker.database`).

    Example::

        opts = CheckOptions(examples=20, probes=("stale-pointer",), tolerance=Tolerance(bitwise=True))
        opts.replace(examples=5).examples  # 5
    """

    spec: CaptureSpec | None = None
    engine: str | Engine = defaults.ENGINE
    examples: int = DEFAULT_EXAMPLES
    steps: int = DEFAULT_STEPS
    capture_sizes: tuple[int, ...] | None = None
    probes: tuple[str, ...] | None = None
    capture: Any = None
    support: Support | None = None
    tolerance: Tolerance = Tolerance()
    seed: int | None = None
    device: str | None = None
    database: str | bool | None = None

    def __post_init__(self) -> None:
        if self.spec is not None and not isinstance(self.spec, CaptureSpec):
            raise ContractError(f"spec must be a graphsafe.CaptureSpec, got {type(self.spec).__name__}")
        if not isinstance(self.engine, Engine):
            name = str(self.engine).strip().lower()
            if name not in ENGINES:
                raise UsageError(f"unknown engine {self.engine!r}: choose one of {', '.join(ENGINES)}")
            object.__setattr__(self, "engine", name)
        for field in ("examples", "steps"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"{field} must be an int, got {type(value).__name__} {value!r}")
            if value < 1:
                raise UsageError(f"{field} must be >= 1, got {value}")
        if self.capture_sizes is not None:
            sizes = tuple(self.capture_sizes)
            for s in sizes:  # the range is checked against the spec (sizes_for)
                if isinstance(s, bool) or not isinstance(s, int):
                    raise UsageError(f"capture size {s!r} must be an int")
            object.__setattr__(self, "capture_sizes", tuple(sorted(set(sizes))) or None)
        if self.probes is not None:  # a name, names or "all"
            object.__setattr__(self, "probes", tuple(p.name for p in resolve_probes(self.probes)))
        if isinstance(self.capture, list):
            object.__setattr__(self, "capture", tuple(self.capture))
        resolve_capture(self.capture)  # names checked now
        if self.support is not None:
            try:
                object.__setattr__(self, "support", Support(self.support))
            except ValueError:
                raise UsageError(f"support must be a graphsafe.Support, got {self.support!r}") from None
            if self.support == Support.NEVER:
                raise UsageError("support=Support.NEVER: nothing may be captured, so there is nothing to check")
        if not isinstance(self.tolerance, Tolerance):
            raise UsageError(f"tolerance must be a graphsafe.Tolerance, got {type(self.tolerance).__name__}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise UsageError(f"seed must be an int >= 0, got {self.seed!r}")
        if self.device is not None:
            object.__setattr__(self, "device", str(self.device))
        if self.database is not None and not isinstance(self.database, bool):
            if not isinstance(self.database, (str, os.PathLike)):
                raise UsageError(
                    f"database must be a directory, a redis:// URL, False or None, got {type(self.database).__name__}"
                )
            object.__setattr__(self, "database", os.fspath(self.database))

    @classmethod
    def build(cls, **kwargs: Any) -> CheckOptions:
        """Options from keyword arguments where None means "the default" (as front ends pass them)."""
        return cls(**{k: v for k, v in kwargs.items() if v is not None})

    def replace(self, **changes: Any) -> CheckOptions:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def support_for(self, cls: type) -> Support:
        """The level a check of ``cls`` runs at: this one, else the class's declared ``support``."""
        return self.support if self.support is not None else Support(getattr(cls, "support", Target.support))

    def spec_for(self, cls: type) -> CaptureSpec:
        """The spec a check of ``cls`` uses: this one, else the class's ``default_spec``, else the default."""
        return self.spec if self.spec is not None else (getattr(cls, "default_spec", None) or CaptureSpec())

    def sizes_for(self, spec: CaptureSpec) -> tuple[int, ...]:
        """The capture sizes, checked against ``spec``."""
        sizes = self.capture_sizes or spec.default_capture_sizes()
        for s in sizes:
            if not 1 <= s <= spec.max_reqs:
                raise UsageError(f"capture size {s} must be an int in [1, spec.max_reqs={spec.max_reqs}]")
        return sizes

    @property
    def policies(self) -> tuple[CapturePolicy, ...]:
        """The capture policies this check explores, one phase each (not knowing the target: None is
        ``"explore"``)."""
        return resolve_capture(defaults.CAPTURE if self.capture is None else self.capture)

    def policies_for(self, cls: type) -> tuple[CapturePolicy, ...]:
        """The capture policies a check of ``cls`` explores: these options' ``capture``, else the class's
        ``engine_capture`` (the policy its engine captures with: vLLM's and SGLang's own backends), else
        ``"explore"``."""
        engine = getattr(cls, "engine_capture", None)
        if self.capture is None and engine is not None:
            return resolve_capture(engine)
        return self.policies

    @property
    def enabled(self) -> set[str]:
        """The finding kinds this check reports."""
        return {p.name for p in resolve_probes(self.probes)}

"""The :class:`Guard`: record at capture, check before replay, report in graphsafe's format."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Literal

from ..engines import recording
from ..engines.recording import Recorder
from ..errors import GuardError, UsageError
from ..findings import Finding
from ..reports import write_report
from .diagnose import diagnose
from .plan import GraphPlan, build_plan

__all__ = ["Guard", "MODES", "ON_FAILURE", "log"]

#: ``off``: nothing is recorded or checked; ``sample``: the first replay of each graph, then every
#: ``every``-th; ``strict``: every replay
MODES = ("off", "sample", "strict")
#: what a failed check does (or a callable that receives each new Finding)
ON_FAILURE = ("raise", "log")

log = logging.getLogger("graphsafe.guard")

HostValues = Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None


def _recorders(rec: Recorder) -> list[Recorder]:
    """The innermost recorders under ``rec``: an engine's own capture, else ``rec`` itself."""
    if not rec.inner:
        return [rec]
    return [leaf for inner in rec.inner for leaf in _recorders(inner)]


def _skip(key: Hashable, host_values: Any = None) -> None:
    """``before_replay`` of a guard in mode ``off``."""


class _Capture(contextlib.ContextDecorator):
    """``with guard.capture(key):`` around one graph's capture (also a decorator for a fixed key)."""

    def __init__(self, guard: Guard, key: Hashable, host_values: Mapping[str, Any] | None):
        self.guard, self.key, self.host_values = guard, key, host_values
        self._rec: Recorder | None = None

    def __enter__(self) -> _Capture:
        if self.guard._off:
            return self
        current = recording.active()
        if current is not None and not current.yields:
            raise UsageError(
                "guard.capture() must enclose the capture (around engine.capture(...), or inside "
                "torch.cuda.graph(...) around the captured call), not run inside graphsafe's own recording"
            )
        self._rec = Recorder("capture", yields=True)
        self._rec.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        rec, self._rec = self._rec, None
        if rec is None:
            return False
        rec.__exit__(*exc)
        if exc[0] is None:
            g = self.guard
            g._plans[self.key] = build_plan(
                self.key, _recorders(rec), g.owner, name=g.name, ignore=g.ignore, host_values=self.host_values
            )
        return False


class Guard:
    """A runtime guard for captured graphs: catches a dead or rebound graph input before the replay.

    ::

        guard = graphsafe.guard.Guard(owner=attn_metadata_builder, mode="sample", every=100,
                                      on_failure="raise", report_dir=None)
        with guard.capture(key=batch_size):      # around the capture: records what each launch reads
            graph = engine.capture(forward)      # (or inside torch.cuda.graph(...), around forward())
        ...
        guard.before_replay(key=batch_size, host_values={"num_kv_splits": n})   # checks per mode
        graph.replay()

    ``owner``: the object whose attributes hold the graph's persistent buffers (a metadata
    builder, an attention backend, a model runner); its attribute paths (``name`` first, e.g.
    ``self.meta.kv_indices``) are what findings name and what is checked for rebinding.
    ``ignore``: ``fnmatch`` patterns of paths not to check for rebinding (liveness still is).
    ``mode``: ``off`` (records nothing, checks nothing), ``sample`` (the first replay of each
    graph, then every ``every``-th) or ``strict`` (every replay).  ``on_failure``: ``"raise"``
    (:class:`~graphsafe.errors.GuardError` carrying the Finding, before the replay runs),
    ``"log"`` (an error on the ``graphsafe.guard`` logger, once per finding) or a callable
    taking each new :class:`~graphsafe.Finding`.  ``report_dir``: write each new finding's
    report there (:func:`graphsafe.reports.write_report`).  ``target``: the name reports file
    findings under (a registered graphsafe target makes their ``repro.py`` runnable).
    """

    def __init__(
        self,
        owner: Any = None,
        *,
        mode: str = "sample",
        every: int = 100,
        on_failure: str | Callable[[Finding], Any] = "raise",
        report_dir: str | os.PathLike | None = None,
        name: str = "self",
        target: str = "",
        ignore: Iterable[str] = (),
    ):
        if mode not in MODES:
            raise UsageError(f"Guard(mode={mode!r}): choose one of {', '.join(MODES)}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise UsageError(f"Guard(every={every!r}): must be an int >= 1 (check one replay in every N)")
        if not callable(on_failure) and on_failure not in ON_FAILURE:
            raise UsageError(
                f"Guard(on_failure={on_failure!r}): choose one of {', '.join(ON_FAILURE)} or pass a callable"
            )
        self.owner, self.mode, self.every, self.on_failure = owner, mode, every, on_failure
        self.report_dir = None if report_dir is None else os.fspath(report_dir)
        self.name, self.target, self.ignore = name, target, tuple(ignore)
        #: every distinct finding made so far, in order
        self.findings: list[Finding] = []
        self._off = mode == "off"
        if self._off:  # nothing runs on replay but this empty call
            self.before_replay = _skip  # type: ignore[method-assign]
        self._period = 1 if mode == "strict" else every
        self._plans: dict[Hashable, GraphPlan] = {}
        self._reported: dict[tuple[str, str, str], str] = {}  # finding key -> its report directory ("" if none)

    @classmethod
    def from_env(cls, owner: Any = None, **defaults: Any) -> Guard:
        """A guard configured by the environment over ``defaults`` (mode ``off`` unless set):
        ``GRAPHSAFE_GUARD`` (off, sample, strict), ``GRAPHSAFE_GUARD_EVERY``, ``GRAPHSAFE_GUARD_ON_FAILURE``
        (raise, log) and ``GRAPHSAFE_GUARD_REPORT_DIR``."""
        kw = {"mode": "off", **defaults}
        env = os.environ
        for var, field in (
            ("GRAPHSAFE_GUARD", "mode"),
            ("GRAPHSAFE_GUARD_ON_FAILURE", "on_failure"),
            ("GRAPHSAFE_GUARD_REPORT_DIR", "report_dir"),
        ):
            if env.get(var):
                kw[field] = env[var].strip()
        if env.get("GRAPHSAFE_GUARD_EVERY"):
            try:
                kw["every"] = int(env["GRAPHSAFE_GUARD_EVERY"])
            except ValueError:
                raise UsageError(
                    f"GRAPHSAFE_GUARD_EVERY={env['GRAPHSAFE_GUARD_EVERY']!r}: must be an int >= 1"
                ) from None
        return cls(owner, **kw)

    # -- state ---------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        """False in mode ``off``: a runner may skip calling the guard at all."""
        return not self._off

    @property
    def keys(self) -> tuple[Hashable, ...]:
        """The keys of the graphs captured under this guard."""
        return tuple(self._plans)

    def forget(self, key: Hashable | None = None) -> None:
        """Drop what was recorded for ``key`` (every key when None), e.g. when its graph is destroyed."""
        if key is None:
            self._plans.clear()
        else:
            self._plans.pop(key, None)

    def stats(self) -> dict[Hashable, dict[str, Any]]:
        """Per graph: storages watched, attribute paths bound, host values known, checks made."""
        return {
            k: {
                "storages": len(p.watched),
                "paths": len(p.bindings),
                "host_values": len(p.host),
                "checks": p.checks,
                "engine": p.engine,
            }
            for k, p in self._plans.items()
        }

    # -- capture ---------------------------------------------------------------------------
    def capture(self, key: Hashable, host_values: Mapping[str, Any] | None = None) -> _Capture:
        """Context manager (or decorator) around the capture of the graph replayed as ``key``.

        Put it around ``engine.capture(...)`` or inside ``torch.cuda.graph(...)`` around the
        captured call; the owner's attribute paths are read when it exits.  ``host_values``:
        values the runner will pass to :meth:`before_replay` that are not Triton arguments.
        Capturing ``key`` again replaces what was recorded for it.
        """
        return _Capture(self, key, dict(host_values) if host_values else None)

    # -- replay ----------------------------------------------------------------------------
    def before_replay(self, key: Hashable, host_values: HostValues = None) -> None:
        """Call just before replaying graph ``key``; checks it when the mode says so.

        ``host_values``: ``{name: value}`` this replay needs, compared with the values the
        capture froze (a Triton argument name such as ``num_kv_splits``, ``kernel.argument``,
        ``kernel.grid``, or a name given to :meth:`capture`); or a function returning such a
        dict, called only on replays that are checked.  Allocates nothing on replays it skips.
        """
        try:
            plan = self._plans[key]
        except KeyError:
            plan = self._plan(key)
        left = plan.left - 1
        if left:
            plan.left = left
            return
        plan.left = self._period
        self._check(plan, host_values)

    def wrap(self, replay: Callable[..., Any], key: Hashable, host_values: HostValues = None) -> Callable[..., Any]:
        """``replay`` preceded by the guard's check of graph ``key`` when the mode says so (``replay``
        itself, unchanged, in mode ``off``).  The cheapest way to guard: a replay that is not checked
        costs one call and a counter (:meth:`before_replay` also looks the graph up).  Wrap after
        the capture, and again after capturing ``key`` anew."""
        if self._off:
            return replay
        plan = self._plan(key)
        period, check = self._period, self._check
        left = plan.left

        @functools.wraps(replay)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            nonlocal left
            left -= 1
            if not left:
                left = period
                check(plan, host_values)
            return replay(*args, **kwargs)

        return guarded

    def check(self, key: Hashable, host_values: HostValues = None) -> list[Finding]:
        """Check graph ``key`` now, whatever the mode, and return the findings (nothing raised or logged)."""
        plan = self._plan(key)
        hv = host_values() if callable(host_values) else host_values
        findings = diagnose(plan, self.owner, hv, plan.checks * self._period)
        for f in findings:
            f.target = self.target
        return findings

    # -- internals --------------------------------------------------------------------------
    def _plan(self, key: Hashable) -> GraphPlan:
        if key not in self._plans:
            raise UsageError(
                f"graphsafe.guard: no graph was captured under key {key!r} "
                f"(captured: {', '.join(map(repr, self._plans)) or 'none'})"
            )
        return self._plans[key]

    def _check(self, plan: GraphPlan, host_values: HostValues) -> None:
        replay = plan.checks * self._period
        plan.checks += 1
        hv = host_values() if callable(host_values) else host_values
        if plan.intact(self.owner) and (not hv or plan.host_ok(hv)):
            plan.replays_at_last_check = replay
            return
        findings = diagnose(plan, self.owner, hv, replay)
        if not findings:
            plan.replays_at_last_check = replay
            return
        self._failed(findings)

    def _failed(self, findings: list[Finding]) -> None:
        fresh = []
        for f in findings:
            f.target = self.target
            if f.key in self._reported:
                f.report_dir = self._reported[f.key]
                continue
            fresh.append(f)
            self.findings.append(f)
            if self.report_dir is not None:
                try:
                    f.report_dir = str(write_report(f, self.report_dir))
                except OSError as e:
                    log.warning("graphsafe.guard: could not write the report of %s at %s: %s", f.kind, f.where, e)
            self._reported[f.key] = f.report_dir
        if self.on_failure == "raise":
            raise GuardError(findings[0].summary(), finding=findings[0], findings=list(findings))
        for f in fresh:
            if self.on_failure == "log":
                log.error("graphsafe.guard: %s", f.summary())
            elif callable(self.on_failure):  # (a name other than raise or log is refused in __init__)
                self.on_failure(f)

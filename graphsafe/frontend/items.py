"""The pytest plugin's machinery: one item per ``--graphsafe`` target, their collector, the run's
options, and the ``graphsafe`` fixture's set-up.

:mod:`graphsafe.frontend.plugin` (options and hooks, nothing heavy) imports this module only once
graphsafe is asked for: a ``--graphsafe*`` option or ``graphsafe_*`` ini key at start-up, or the
first use of the ``graphsafe`` fixture.  It imports torch, the checker and the engines.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .. import defaults
from ..checker import AuditResult, CheckOptions, resolve_target, validate_target
from ..engines.triton_env import interpreter_active
from ..errors import ContractError, TargetFailure, UsageError
from ..findings import CheckResult
from . import options as o
from . import schedule
from .devices import engine_problem, gpu_count, interpreter_for, prepare_engine, worker_device, worker_id
from .fixture import GraphsafeFixture, error_text, failure_line, failure_text, marker_given
from .options import RunOptions
from .runner import audit, run
from .sandbox import MAX_LIVE, get_sandbox, warm
from .sandbox.child import preload_of

__all__ = [
    "PluginRun",
    "GraphsafeItem",
    "GraphsafeCollector",
    "GraphsafeFailure",
    "prepare_early",
    "configure",
    "header",
    "collect",
    "configure_controller",
    "prestart_upcoming",
    "fixture_for",
    "gpu_sharing_hint",
]


@dataclass(frozen=True)
class PluginRun:
    """The graphsafe options of one pytest run, resolved (:func:`graphsafe.frontend.options.resolve`)."""

    targets: list[str]
    options: o.Resolved
    audit: bool
    shard: tuple[int, int] | None = None  # (K, N): ``targets`` are shard K's

    @property
    def check(self) -> CheckOptions:
        return self.options.check

    @property
    def run(self) -> RunOptions:
        return self.options.run

    @property
    def engine(self) -> str:
        return o.engine_name(self.check)


_RUN = pytest.StashKey[PluginRun]()
_WARNED = pytest.StashKey[bool]()


def _resolve(config: pytest.Config) -> PluginRun:
    try:
        targets, shard = o.pytest_targets(config), o.pytest_shard(config)
        resolved = o.resolve(o.pytest_given(config), "plugin")
    except UsageError as e:
        raise pytest.UsageError(f"graphsafe: {e}") from None
    if shard is not None:  # every process (xdist's controller, each worker) computes the same split
        kinds = {t: schedule.kind_of(t) for t in targets}
        targets = schedule.shard(targets, kinds, schedule.history(config, resolved.check.engine), *shard)
    return PluginRun(targets, resolved, o.pytest_audit(config), shard)


def run_of(config: pytest.Config) -> PluginRun:
    """The run's options (resolved on first use, e.g. by a fixture when no option asked for graphsafe)."""
    opts = config.stash.get(_RUN, None)
    if opts is None:
        opts = config.stash[_RUN] = _resolve(config)
    return opts


# -- start-up (graphsafe asked for by an option or ini key) ------------------------------------------
def prepare_early(config: pytest.Config) -> None:
    """Before conftest files import kernel modules: switch Triton to its interpreter when the engine
    will be the emulator (``config.option`` is not filled in yet; the known args are)."""
    given = o.pytest_given(config, early=True).get("engine")
    try:
        prepare_engine(o.parse_engine(given.value, given.where) if given is not None else defaults.ENGINE)
    except UsageError:
        return  # reported as a usage error by pytest_configure


def configure(config: pytest.Config) -> None:
    """pytest's own process, or an xdist worker: resolve the options (a bad one is a usage error),
    prepare the engine, and start the fork server warming up while pytest collects."""
    # graphsafe's CUDA pre-screen turns on torch's sync debug mode, which warns that it is a prototype
    config.addinivalue_line("filterwarnings", "ignore:Synchronization debug mode is a prototype feature:UserWarning")
    opts = config.stash[_RUN] = _resolve(config)
    o.register_profiles()
    prepare_engine(opts.engine)
    if (
        opts.targets
        and opts.run.isolate == "target"
        and isinstance(opts.check.engine, str)
        and not engine_problem(opts.engine)
        and not config.option.collectonly
    ):
        # the fork server imports torch, graphsafe and the targets' libraries while pytest collects
        warm(opts.engine, preload=tuple(m for t in opts.targets for m in preload_of(t)))


def configure_controller(config: pytest.Config) -> list[str]:
    """xdist's controller, once its workers are spawned: resolve the options (a bad one is a usage
    error) and return the header lines.  It runs no item: no engine, no fork server."""
    run_of(config)
    return header(config) or []


def header(config: pytest.Config) -> list[str] | None:
    opts = config.stash.get(_RUN, None)
    if opts is None or not opts.targets:
        return None
    c, r = opts.check, opts.run
    lines = [
        f"graphsafe: {len(opts.targets)} target(s)"
        + (f" (shard {opts.shard[0]}/{opts.shard[1]})" if opts.shard else "")
        + f", engine {c.engine}, profile {str(r.profile).removeprefix('graphsafe-')}, "
        f"{c.examples} examples"
        + ("" if opts.options.examples_given else " (the profile's)")
        + f", probes {','.join(c.probes) if c.probes else 'all'}"
        + (f", reports in {r.report_dir}" if r.report_dir else "")
        + (
            f", one process per target (timeout {r.timeout:g}s)"
            if r.isolate == "target"
            else f", no isolation (timeout {r.timeout:g}s)"
        )
    ]
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 1 and c.engine in ("auto", "cuda"):
        hint = gpu_sharing_hint(workers, gpu_count())
        if hint:
            lines.append(hint)
    return lines


def gpu_sharing_hint(workers: int, gpus: int) -> str | None:
    """A header line when more xdist workers than GPUs will run CUDA checks, else None.

    Processes sharing one GPU without MPS are time-sliced: two processes replaying small graphs
    together get fewer replays per second than one process alone (``benchmarks/gpu_sharing.py``,
    its result ``benchmarks/results/gpu-sharing-gpu.json``).
    """
    if gpus < 1 or workers <= gpus:
        return None
    return (
        f"graphsafe: {workers} workers share {gpus} GPU(s); the GPU time-slices between processes, so "
        "workers beyond one per GPU add little speed unless MPS is running (benchmarks/gpu_sharing.py)"
    )


def collect(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Append one item per target, after the run's own items."""
    if run_of(config).targets:
        collector = GraphsafeCollector.from_parent(session, name="graphsafe", nodeid="graphsafe")
        collector.others = len(items)  # collected before graphsafe's items: they take xdist's first chunks
        items.extend(session.genitems(collector))  # reported like any collector: "collected N items" counts these


def prestart_upcoming(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """While ``item`` runs, the sandboxes of the next items' targets import torch and their targets in
    the background: start-up overlaps the current check instead of following it."""
    for upcoming in _upcoming(item, nextitem):
        upcoming.prestart()


def _upcoming(item: pytest.Item, nextitem: pytest.Item | None) -> list[GraphsafeItem]:
    """The next graphsafe items whose sandboxes may start now (under xdist only ``nextitem`` is
    known to be this worker's; otherwise the session runs ``session.items`` in order)."""
    if not isinstance(nextitem, GraphsafeItem):
        return []
    if worker_id() is not None:
        return [nextitem]
    items = item.session.items
    start = next((i for i, it in enumerate(items) if it is nextitem), len(items))
    return [it for it in items[start : start + MAX_LIVE - 1] if isinstance(it, GraphsafeItem)]


# -- the fixture ------------------------------------------------------------------------------------
def fixture_for(request: pytest.FixtureRequest) -> GraphsafeFixture:
    """The ``graphsafe`` fixture of one test: the run's options (not its isolation, which is the
    items'), then the test's markers.  At its first use in a process without a GPU, Triton is
    switched to its interpreter here, which is too late for kernels already defined: say so once."""
    config = request.config
    opts = run_of(config)
    needs = interpreter_for(opts.engine)
    late = needs and not interpreter_active() and "triton" in sys.modules
    prepare_engine(opts.engine)
    if late and not config.stash.get(_WARNED, False):
        config.stash[_WARNED] = True
        request.node.warn(
            pytest.PytestWarning(
                "graphsafe: no GPU here, so Triton was switched to its interpreter at the first use of the graphsafe "
                "fixture, after triton was imported: kernels defined before now do not run under it. To switch it on at "
                "start-up, pass --graphsafe-engine auto (or set graphsafe_engine = auto in the pytest ini file), or set "
                "TRITON_INTERPRET=1"
            )
        )
    given = {k: g for k, g in o.pytest_given(config).items() if k != "isolate"}
    return GraphsafeFixture({**given, **marker_given(request.node)})


# -- items --------------------------------------------------------------------------------------------
class GraphsafeCollector(pytest.Collector):
    """One item per ``--graphsafe`` target, in :mod:`graphsafe.frontend.schedule`'s order; identical on
    every xdist worker (no randomness)."""

    others = 0

    def collect(self):
        opts = run_of(self.config)
        kinds = {t: schedule.kind_of(t) for t in opts.targets}
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1) if worker_id() else 1
        history = schedule.history(self.config, opts.check.engine)
        examples = 1 if opts.audit else opts.check.examples  # an audit's grid is not split
        for key in schedule.units(opts.targets, kinds, history, workers, self.others, examples):
            target, part, parts = schedule.target_of(key)
            yield GraphsafeItem.from_parent(self, name=f"graphsafe[{key}]", target=target, part=(part, parts))


class GraphsafeFailure(Exception):
    """A check found something, or the target failed to run; carries the text the item prints."""


class GraphsafeItem(pytest.Item):
    """One target's check.  Runs in the setup phase (so that usage and contract errors are pytest
    errors); the call phase fails with what the check found."""

    def __init__(self, *, target: str, part: tuple[int, int] = (1, 1), **kwargs: Any):
        kwargs.setdefault("nodeid", kwargs["name"])  # "graphsafe[...]", not "graphsafe::graphsafe[...]"
        super().__init__(**kwargs)
        self.target = target
        self.part = part  # (j, parts): a share of the examples, with seeds of its own (schedule.split_parts)
        self.cls: type | None = None
        self.result: CheckResult | AuditResult | None = None
        self.failure: str | None = None
        self.add_marker("graphsafe")

    def _plan(self) -> tuple[type, CheckOptions, RunOptions]:
        opts = run_of(self.config)
        cls, _ = resolve_target(self.target)
        validate_target(cls)
        self.cls = cls
        problem = engine_problem(opts.engine)
        if problem:
            raise UsageError(problem)
        check = opts.check
        if check.capture_sizes:
            spec = check.spec_for(cls)
            fitting = tuple(s for s in check.capture_sizes if s <= spec.max_reqs)
            if not fitting:
                raise UsageError(
                    f"{self.target}: no capture size in {list(check.capture_sizes)} fits its spec "
                    f"(max_reqs={spec.max_reqs})"
                )
            check = check.replace(capture_sizes=fitting)
        if self.part[1] > 1:
            check = schedule.part_check(check, opts.run.profile, *self.part)
        return cls, check, opts.run

    def setup(self) -> None:
        msg = None
        box = None
        opts = run_of(self.config)
        # the durations' cache key (schedule.DurationRecorder, in xdist's controller, cannot tell it)
        self.user_properties.append((schedule.ENGINE_PROPERTY, schedule.engine_key(opts.check.engine)))
        try:
            cls, check, run_opts = self._plan()
            box = self._sandbox(cls)
            before = len(box.startups) if box is not None else 0
            if opts.audit:
                self.result = audit(
                    cls, check, report_dir=run_opts.report_dir, isolate=run_opts.isolate, timeout=run_opts.timeout
                )
            else:
                self.result = run(cls, check, run_opts, label=self.target)
        except TargetFailure as e:
            self.failure = failure_line(e, opts.run.isolate == "target")
        except (UsageError, ContractError) as e:  # graphsafe's own errors keep their traceback
            msg = error_text(e)
        self.user_properties.append(("graphsafe_worker", worker_id() or "main"))
        if box is not None:  # the sandbox children this item waited for: {"method", "seconds"} each
            self.user_properties.append(("graphsafe_startups", json.dumps(box.startups[before:])))
        if msg is not None:  # outside the except block: no chained traceback in the report
            pytest.fail(msg, pytrace=False)

    def _sandbox(self, cls: type):
        """The sandbox this item's check runs in (the runner's), or None without isolation."""
        opts = run_of(self.config)
        if opts.run.isolate != "target" or not isinstance(opts.check.engine, str):
            return None
        return get_sandbox(cls, engine=opts.engine, device=worker_device(opts.engine))

    def runtest(self) -> None:
        if self.failure is not None:
            raise GraphsafeFailure(self.failure)
        assert self.result is not None, "setup() either checked or failed"
        if isinstance(self.result, AuditResult):
            if not self.result.ok:
                raise GraphsafeFailure(self.result.summary())
        elif not self.result.ok:
            raise GraphsafeFailure(failure_text(self.result))

    def prestart(self) -> None:
        """Start this item's sandbox process in the background (isolated runs only)."""
        opts = run_of(self.config)
        if opts.run.isolate != "target" or not isinstance(opts.check.engine, str) or engine_problem(opts.engine):
            return
        try:
            self._sandbox(resolve_target(self.target)[0]).start(wait=False)
        except Exception:  # noqa: BLE001 - the item's own check reports whatever this was
            pass

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GraphsafeFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        # point at the target class when it is known, so -vv shows where the backend lives
        if self.cls is not None:
            try:
                return Path(inspect.getfile(self.cls)), inspect.getsourcelines(self.cls)[1] - 1, self.name
            except (TypeError, OSError):
                pass
        return self.path, None, self.name

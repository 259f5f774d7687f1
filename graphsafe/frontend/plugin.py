"""pytest plugin: one test item per target, and a ``graphsafe`` fixture for other test suites.

Loaded through the ``pytest11`` entry point (disable with ``-p no:graphsafe``)::

    pytest -n auto --graphsafe all
    pytest --graphsafe mypkg.attn:MyBackend --graphsafe-examples 200 --graphsafe-report-dir reports

Every ``--graphsafe`` target becomes one item, ``graphsafe[<target>]``, collected after the run's
ordinary tests: one check with every selected probe and capture size, captured once.  Items of
different targets are independent, so ``pytest -n K`` (xdist's default ``--dist load``) spreads
targets over workers, and worker ``gwN`` uses GPU ``N % count``.  The items are collected in the
order that lets the workers end together, longest expected first (:mod:`graphsafe.frontend.schedule`).
An item passes, fails with the findings (kind, where, minimal step sequence, report path), fails
with one paragraph when the target crashed, hung or broke its CUDA context, or is an *error* with
one line when the target cannot be checked (unknown name, broken contract, bad options).

Isolation: by default (``--graphsafe-isolate target``) each target's check runs in a child process of
its own (:mod:`graphsafe.frontend.sandbox`), killed after ``--graphsafe-timeout`` seconds; with
``none`` it runs in the pytest process under the same timeout.  The children fork from one fork
server per pytest process, which imports torch and graphsafe once.  Each item records the start-up
of the children it waited for in its ``user_properties`` (in a ``--junitxml`` report).

Options (ini key in brackets; the command line wins): ``--graphsafe TARGET`` [``graphsafe_targets``],
``--graphsafe-engine``, ``--graphsafe-examples``, ``--graphsafe-steps``, ``--graphsafe-capture-sizes``,
``--graphsafe-probes``, ``--graphsafe-report-dir``, ``--graphsafe-profile``, ``--graphsafe-isolate``,
``--graphsafe-timeout`` [``graphsafe_<name>``].
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..checker import AuditResult, CheckOptions, resolve_target, validate_target
from ..errors import ContractError, TargetFailure, UsageError
from . import options as o
from . import schedule
from .devices import engine_problem, gpu_count, prepare_engine, worker_device, worker_id
from .fixture import GraphsafeFixture, error_text, failure_line, failure_text, marker_defaults
from .inprocess import RunOptions
from .runner import audit, run
from .sandbox import MAX_LIVE, close_all, get_sandbox, warm

__all__ = ["GraphsafeItem", "GraphsafeCollector", "GraphsafeFailure", "graphsafe"]

_NAMES = ("engine", "examples", "steps", "capture_sizes", "capture", "probes", "report_dir", "profile", "isolate",
          "timeout")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphsafe", "graphsafe: CUDA-graph capture checks")
    group.addoption("--graphsafe", action="append", dest="graphsafe_targets", default=None, metavar="TARGET",
                    help="check TARGET ('module:Class', a registered name, or 'all'); repeatable. One item per target.")
    helps = {
        "engine": ("ENGINE", "auto (default: cuda when a GPU is visible, else emulate), cuda or emulate"),
        "examples": ("N", "Hypothesis examples per target (default: by profile, fast 10 / ci 25 / thorough 200)"),
        "steps": ("N", f"most batches per drawn step sequence (default {CheckOptions.steps})"),
        "capture_sizes": ("1,2,4", "capture sizes to test (default: each target's default_spec sizes)"),
        "capture": ("POLICIES", "how graphs are captured: explore (default: worst, ascending, minimal and drawn "
                                "batches) or some of worst, ascending, minimal, drawn"),
        "probes": ("P1,P2", "finding kinds to report (default: all)"),
        "report_dir": ("DIR", "write a report for each finding under DIR (default: no reports)"),
        "profile": ("PROFILE", "Hypothesis profile for graphsafe checks: fast, ci or thorough "
                               "(default: ci when $CI is true, else fast)"),
        "isolate": ("MODE", "target (default): each target's check in a process of its own, so that a crash, "
                            "hang or broken CUDA context fails only that target; none: in the pytest process"),
        "timeout": ("SECONDS", f"stop a target's check after SECONDS (default {o.DEFAULT_TIMEOUT_S:g})"),
    }
    for name in _NAMES:
        metavar, text = helps[name]
        flag = "--graphsafe-" + name.replace("_", "-")
        group.addoption(flag, dest=f"graphsafe_{name}", default=None, metavar=metavar, help=text)
        parser.addini(f"graphsafe_{name}", f"like {flag}", default="")
    group.addoption("--graphsafe-audit", action="store_true", dest="graphsafe_audit", default=None,
                    help="audit each target instead of checking it: every batch kind under worst-case and minimal "
                         "capture; an item fails when the declared support level is higher than the safe one")
    parser.addini("graphsafe_audit", "audit the targets instead of checking them (true/false)", type="bool", default=False)
    parser.addini("graphsafe_targets", "targets to check (one per line), like --graphsafe", type="linelist", default=[])


@dataclass
class Options:
    """The resolved graphsafe options of one pytest run."""

    targets: list[str] = field(default_factory=list)
    check: CheckOptions = CheckOptions()
    run: RunOptions = RunOptions(isolate="target")
    examples_given: bool = False
    audit: bool = False


_OPTIONS = pytest.StashKey[Options]()


def _raw(config: pytest.Config, name: str) -> tuple[Any, str]:
    """(value, where it came from): the command line if given, else the ini key, else None."""
    v = getattr(config.option, f"graphsafe_{name}", None)
    if v is not None:
        return v, f"--graphsafe-{name.replace('_', '-')}"
    try:
        ini = config.getini(f"graphsafe_{name}")
    except (ValueError, KeyError):  # the plugin registered after the ini was parsed
        ini = None
    if ini not in (None, "", []):
        return ini, f"ini graphsafe_{name}"
    return None, ""


def _resolve_options(config: pytest.Config) -> Options:
    raw = {name: _raw(config, name) for name in _NAMES}
    parse = {"engine": o.parse_engine, "examples": o.parse_int, "steps": o.parse_int, "capture_sizes": o.parse_sizes,
             "capture": o.parse_capture, "probes": o.parse_probes, "isolate": o.parse_isolate,
             "timeout": o.parse_timeout}
    val = {n: (parse[n](v, where) if n in parse and v is not None else v) for n, (v, where) in raw.items()}
    try:
        profile = o.profile_name(val["profile"])
    except UsageError as e:
        raise UsageError(f"{raw['profile'][1]}: {e}") from None
    report_dir = val["report_dir"]
    if report_dir is not None:
        base = config.invocation_params.dir
        if raw["report_dir"][1].startswith("ini") and config.inipath is not None:
            base = config.inipath.parent
        # absolute, so that every xdist worker writes to the same directory
        report_dir = str((Path(base) / os.path.expanduser(str(report_dir))).resolve())
    targets = config.option.graphsafe_targets
    check = CheckOptions.build(engine=val["engine"], examples=val["examples"] or o.default_examples(profile),
                               steps=val["steps"], capture_sizes=val["capture_sizes"], capture=val["capture"],
                               probes=val["probes"])
    run_opts = RunOptions(isolate=val["isolate"] or "target", timeout=val["timeout"] or o.DEFAULT_TIMEOUT_S,
                          report_dir=report_dir, profile=profile)
    audit = config.option.graphsafe_audit if config.option.graphsafe_audit is not None else config.getini("graphsafe_audit")
    return Options(o.expand_targets(targets if targets is not None else config.getini("graphsafe_targets") or []),
                   check, run_opts, val["examples"] is not None, bool(audit))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # Before conftest files import kernel modules: switch Triton to its interpreter when the engine
    # will be the emulator (config.option is not filled in yet; the known args are).
    value = getattr(early_config.known_args_namespace, "graphsafe_engine", None) or _raw(early_config, "engine")[0]
    try:
        prepare_engine("auto" if value is None else o.parse_engine(value))
    except UsageError:
        return  # reported as a usage error by pytest_configure


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "graphsafe(**kwargs): options for the graphsafe fixture's checks in this test "
                                       "(engine, examples, steps, probes, capture_sizes, report_dir, profile, ...)")
    # graphsafe's CUDA pre-screen turns on torch's sync debug mode, which warns that it is a prototype
    config.addinivalue_line("filterwarnings", "ignore:Synchronization debug mode is a prototype feature:UserWarning")
    try:
        config.stash[_OPTIONS] = _resolve_options(config)
    except UsageError as e:
        raise pytest.UsageError(f"graphsafe: {e}") from None
    o.register_profiles()
    opts = config.stash[_OPTIONS]
    engine = opts.check.engine
    prepare_engine(engine if isinstance(engine, str) else "auto")
    if opts.targets and not hasattr(config, "workerinput"):  # not in xdist workers: see schedule
        config.pluginmanager.register(schedule.DurationRecorder(config, engine), "graphsafe-durations")
    controller = (getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "tx", None))
                  and not hasattr(config, "workerinput"))  # xdist's controller runs no item
    if (opts.targets and opts.run.isolate == "target" and isinstance(engine, str) and not engine_problem(engine)
            and not controller and not config.option.collectonly):
        warm(engine)  # the fork server imports torch and graphsafe while pytest collects


def pytest_unconfigure(config: pytest.Config) -> None:
    close_all()  # xdist workers may leave through os._exit, skipping atexit


def _options(config: pytest.Config) -> Options:
    opts = config.stash.get(_OPTIONS, None)
    if opts is None:  # the plugin was registered after pytest_configure ran
        opts = config.stash[_OPTIONS] = _resolve_options(config)
    return opts


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    opts = config.stash.get(_OPTIONS, None)
    if opts is None or not opts.targets:
        return None
    c, r = opts.check, opts.run
    lines = [
        f"graphsafe: {len(opts.targets)} target(s), engine {c.engine}, profile {r.profile.removeprefix('graphsafe-')}, "
        f"{c.examples} examples" + ("" if opts.examples_given else " (the profile's)")
        + f", probes {','.join(c.probes) if c.probes else 'all'}"
        + (f", reports in {r.report_dir}" if r.report_dir else "")
        + (f", one process per target (timeout {r.timeout:g}s)" if r.isolate == "target"
           else f", no isolation (timeout {r.timeout:g}s)")
    ]
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 1 and c.engine in ("auto", "cuda"):
        hint = gpu_sharing_hint(workers, gpu_count())
        if hint:
            lines.append(hint)
    return lines


def gpu_sharing_hint(workers: int, gpus: int) -> str | None:
    """A header line when more xdist workers than GPUs will run CUDA checks, else None.

    Processes sharing one GPU without MPS are time-sliced: measured on an H200
    (``benchmarks/gpu_sharing.py``), two processes replaying small graphs got 0.28x
    the replays per second of one process alone, together.
    """
    if gpus < 1 or workers <= gpus:
        return None
    return (f"graphsafe: {workers} workers share {gpus} GPU(s); the GPU time-slices between processes, so "
            "workers beyond one per GPU add little speed unless MPS is running (benchmarks/gpu_sharing.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: the items exist before -k/-m/--deselect filter the list.
    if _options(config).targets:
        collector = GraphsafeCollector.from_parent(session, name="graphsafe", nodeid="graphsafe")
        collector.others = len(items)  # collected before graphsafe's items: they take xdist's first chunks
        items.extend(session.genitems(collector))  # reported like any collector: "collected N items" counts these


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    # xdist controller, for each worker: the durations it read, so that every worker (on any host) orders alike
    node.workerinput[schedule.WORKER_KEY] = schedule.history(node.config, _options(node.config).check.engine)


class GraphsafeCollector(pytest.Collector):
    """One item per ``--graphsafe`` target, in :mod:`graphsafe.frontend.schedule`'s order; identical on
    every xdist worker (no randomness)."""

    others = 0

    def collect(self):
        opts = _options(self.config)
        kinds = {t: schedule.kind_of(t) for t in opts.targets}
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1) if worker_id() else 1
        order = schedule.longest_first(opts.targets, kinds, schedule.history(self.config, opts.check.engine),
                                       workers=workers, others=self.others)
        for target in order:
            yield GraphsafeItem.from_parent(self, name=f"graphsafe[{target}]", target=target)


def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    # While this item runs, the sandboxes of the next items' targets import torch and their
    # targets in the background: start-up overlaps the current check instead of following it.
    for upcoming in _upcoming(item, nextitem):
        upcoming.prestart()
    return None  # a firstresult hook: let pytest run the item


def _upcoming(item: pytest.Item, nextitem: pytest.Item | None) -> list["GraphsafeItem"]:
    """The next graphsafe items whose sandboxes may start now (under xdist only ``nextitem`` is
    known to be this worker's; otherwise the session runs ``session.items`` in order)."""
    if not isinstance(nextitem, GraphsafeItem):
        return []
    if worker_id() is not None:
        return [nextitem]
    items = item.session.items
    start = next((i for i, it in enumerate(items) if it is nextitem), len(items))
    return [it for it in items[start:start + MAX_LIVE - 1] if isinstance(it, GraphsafeItem)]


class GraphsafeFailure(Exception):
    """A check found something, or the target failed to run; carries the text the item prints."""


class GraphsafeItem(pytest.Item):
    """One target's check.  Runs in the setup phase (so that usage and contract errors are pytest
    errors); the call phase fails with what the check found."""

    def __init__(self, *, target: str, **kwargs: Any):
        kwargs.setdefault("nodeid", kwargs["name"])  # "graphsafe[...]", not "graphsafe::graphsafe[...]"
        super().__init__(**kwargs)
        self.target = target
        self.cls: type | None = None
        self.result = None
        self.failure: str | None = None
        self.add_marker("graphsafe")

    def _plan(self) -> tuple[type, CheckOptions, RunOptions]:
        opts = _options(self.config)
        cls, _ = resolve_target(self.target)
        validate_target(cls)
        self.cls = cls
        problem = engine_problem(opts.check.engine if isinstance(opts.check.engine, str) else "auto")
        if problem:
            raise UsageError(problem)
        check = opts.check
        if check.capture_sizes:
            spec = check.spec_for(cls)
            fitting = tuple(s for s in check.capture_sizes if s <= spec.max_reqs)
            if not fitting:
                raise UsageError(f"{self.target}: no capture size in {list(check.capture_sizes)} fits its spec "
                                 f"(max_reqs={spec.max_reqs})")
            check = check.replace(capture_sizes=fitting)
        return cls, check, opts.run

    def setup(self) -> None:
        msg = None
        box = None
        try:
            cls, check, run_opts = self._plan()
            box = self._sandbox(cls)
            before = len(box.startups) if box is not None else 0
            if _options(self.config).audit:
                self.result = audit(cls, check, report_dir=run_opts.report_dir, isolate=run_opts.isolate,
                                    timeout=run_opts.timeout)
            else:
                self.result = run(cls, check, run_opts, label=self.target)
        except TargetFailure as e:
            self.failure = failure_line(e, _options(self.config).run.isolate == "target")
        except (UsageError, ContractError) as e:  # graphsafe's own errors keep their traceback
            msg = error_text(e)
        self.user_properties.append(("graphsafe_worker", worker_id() or "main"))
        if box is not None:  # the sandbox children this item waited for: {"method", "seconds"} each
            self.user_properties.append(("graphsafe_startups", json.dumps(box.startups[before:])))
        if msg is not None:  # outside the except block: no chained traceback in the report
            pytest.fail(msg, pytrace=False)

    def _sandbox(self, cls: type):
        """The sandbox this item's check runs in (the runner's), or None without isolation."""
        opts = _options(self.config)
        engine = opts.check.engine
        if opts.run.isolate != "target" or not isinstance(engine, str):
            return None
        return get_sandbox(cls, engine=engine, device=worker_device(engine))

    def runtest(self) -> None:
        if self.failure is not None:
            raise GraphsafeFailure(self.failure)
        if isinstance(self.result, AuditResult):
            if not self.result.ok:
                raise GraphsafeFailure(self.result.summary())
        elif not self.result.ok:
            raise GraphsafeFailure(failure_text(self.result, self.target))

    def prestart(self) -> None:
        """Start this item's sandbox process in the background (isolated runs only)."""
        opts = _options(self.config)
        engine = opts.check.engine
        if opts.run.isolate != "target" or not isinstance(engine, str) or engine_problem(engine):
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


@pytest.fixture
def graphsafe(request: pytest.FixtureRequest) -> GraphsafeFixture:
    """Check a target from a test: ``graphsafe.check(MyTarget)`` fails the test on findings."""
    opts = _options(request.config)
    defaults = {f.name: getattr(opts.check, f.name) for f in dataclasses.fields(CheckOptions)}
    defaults["examples"] = opts.check.examples if opts.examples_given else None
    defaults.update(report_dir=opts.run.report_dir, profile=opts.run.profile, isolate="none", timeout=opts.run.timeout)
    return GraphsafeFixture(marker_defaults(request.node, defaults))

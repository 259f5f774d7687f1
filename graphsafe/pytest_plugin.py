"""pytest plugin: check targets as test items, and a ``graphsafe`` fixture for other test suites.

Loaded automatically through the ``pytest11`` entry point (disable with
``-p no:graphsafe``).

Test items, one per target x probe x capture size::

    pytest --graphsafe triton_mla:capture_max_seq_len --graphsafe mypkg.attn:MyBackend -n auto
    pytest --graphsafe all --graphsafe-probes stale-pointer,lazy-init --graphsafe-capture-sizes 1,4

Items are named ``graphsafe[<target>-<probe>-<capture size>]`` (``-k``, ``-m graphsafe``
and ``--deselect`` work on them) and are collected after, and in addition to, the
ordinary tests of the run.  A failing item prints the finding (kind, where, minimal
step sequence, report path) instead of a traceback; a target that cannot be resolved
or breaks the contract gives one item, ``graphsafe[<target>]``, failing with one line.

Fixture and marker::

    @pytest.mark.graphsafe(examples=50, probes=["stale-pointer"])
    def test_my_backend(graphsafe):
        result = graphsafe.check(MyBackend)   # fails the test with the findings
        assert result.examples > 0

Options (ini key in brackets; the command line wins):

``--graphsafe TARGET`` [``graphsafe_targets``, one per line], ``--graphsafe-engine``
[``graphsafe_engine``], ``--graphsafe-examples`` [``graphsafe_examples``],
``--graphsafe-steps`` [``graphsafe_steps``], ``--graphsafe-capture-sizes``
[``graphsafe_capture_sizes``], ``--graphsafe-probes`` [``graphsafe_probes``],
``--graphsafe-report-dir`` [``graphsafe_report_dir``], ``--graphsafe-profile``
[``graphsafe_profile``], ``--graphsafe-isolate`` [``graphsafe_isolate``],
``--graphsafe-timeout`` [``graphsafe_timeout``].

Isolation: by default (``--graphsafe-isolate target``) each target's items run
their checks in a child process of that target's own (one per target and xdist
worker, shared by its items; see :mod:`graphsafe._internal.sandbox`).  A target
that segfaults, hangs past ``--graphsafe-timeout`` seconds (default 600, per
item) or breaks its CUDA context fails its item with one paragraph, and its
next item gets a fresh process; other targets are not affected.  With
``--graphsafe-isolate none`` checks run in the pytest process; after an item
breaks the CUDA context there, the remaining CUDA items of the process fail
fast with "CUDA context broken by <item>".  The ``graphsafe`` fixture runs in
the test's process unless its marker (or ``check()`` call) says
``isolate="target"`` (optionally with ``timeout=...``).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ._internal import frontend, sandbox
from ._internal.frontend import ConfigError
from ._internal.xdist import assign_device

__all__ = ["GraphsafeItem", "GraphsafeCollector", "GraphsafeFixture", "GraphsafeFailure"]


# -- options -------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphsafe", "graphsafe: CUDA-graph capture checks")
    group.addoption(
        "--graphsafe", action="append", dest="graphsafe_targets", default=None, metavar="TARGET",
        help="check TARGET ('module:Class', a registered name, or 'all'); repeatable. "
             "Adds one test item per target x probe x capture size.",
    )
    group.addoption("--graphsafe-engine", dest="graphsafe_engine", default=None, metavar="ENGINE",
                    help="auto (default: cuda when a GPU is visible, else emulate), cuda or emulate")
    group.addoption("--graphsafe-examples", dest="graphsafe_examples", default=None, metavar="N",
                    help="Hypothesis examples per check (default: by profile, fast 10 / ci 25 / thorough 200)")
    group.addoption("--graphsafe-steps", dest="graphsafe_steps", default=None, metavar="N",
                    help="most batches per drawn step sequence (default 4)")
    group.addoption("--graphsafe-capture-sizes", dest="graphsafe_capture_sizes", default=None, metavar="1,2,4",
                    help="capture sizes to test (default: each target's default_spec sizes)")
    group.addoption("--graphsafe-probes", dest="graphsafe_probes", default=None, metavar="P1,P2",
                    help="probes to run, one item each (default: every default probe)")
    group.addoption("--graphsafe-report-dir", dest="graphsafe_report_dir", default=None, metavar="DIR",
                    help="write a report for each finding under DIR (default: no reports)")
    group.addoption("--graphsafe-profile", dest="graphsafe_profile", default=None, metavar="PROFILE",
                    help="Hypothesis profile for graphsafe checks: fast, ci or thorough "
                         "(default: ci when $CI is true, else fast)")
    group.addoption("--graphsafe-isolate", dest="graphsafe_isolate", default=None, metavar="MODE",
                    help="target (default): run each target's checks in a process of its own, so that a "
                         "crash, hang or broken CUDA context fails only that target's items; "
                         "none: run them in the pytest process")
    group.addoption("--graphsafe-timeout", dest="graphsafe_timeout", default=None, metavar="SECONDS",
                    help="with isolation, fail an item whose check gives no result within SECONDS and kill "
                         "its process (default 600)")
    parser.addini("graphsafe_targets", "targets to check (one per line), like --graphsafe", type="linelist", default=[])
    parser.addini("graphsafe_engine", "graphsafe engine: auto, cuda or emulate", default="")
    parser.addini("graphsafe_examples", "Hypothesis examples per graphsafe check", default="")
    parser.addini("graphsafe_steps", "most batches per drawn step sequence", default="")
    parser.addini("graphsafe_capture_sizes", "capture sizes, comma separated", default="")
    parser.addini("graphsafe_probes", "probes, comma separated", default="")
    parser.addini("graphsafe_report_dir", "report directory (relative to the ini file)", default="")
    parser.addini("graphsafe_profile", "Hypothesis profile: fast, ci or thorough", default="")
    parser.addini("graphsafe_isolate", "where --graphsafe items run their checks: target (default) or none", default="")
    parser.addini("graphsafe_timeout", "seconds an isolated graphsafe item may run (default 600)", default="")


@dataclass
class Options:
    """The resolved graphsafe options of one pytest run."""

    targets: list[str] = field(default_factory=list)
    engine: str = "auto"
    examples: int | None = None  # None: the profile's default
    steps: int | None = None
    capture_sizes: tuple[int, ...] | None = None
    probes: tuple[str, ...] = ()
    report_dir: str | None = None
    profile: str = "graphsafe-fast"
    isolate: str = "target"
    timeout: float = frontend.DEFAULT_TIMEOUT_S

    @property
    def effective_examples(self) -> int:
        return self.examples if self.examples is not None else frontend.default_examples(self.profile)


_OPTIONS = pytest.StashKey[Options]()


def _raw(config: pytest.Config, name: str) -> tuple[Any, str]:
    """(value, where it came from): the command line if given, else the ini key, else None."""
    v = getattr(config.option, f"graphsafe_{name}", None)
    if v is not None:
        return v, f"--graphsafe-{name.replace('_', '-')}"
    try:
        ini = config.getini(f"graphsafe_{name}")
    except (ValueError, KeyError):  # pragma: no cover - ini key not registered
        ini = None
    if ini not in (None, "", []):
        return ini, f"ini graphsafe_{name}"
    return None, ""


def _engine(config: pytest.Config) -> str:
    v, where = _raw(config, "engine")
    return "auto" if v is None else frontend.parse_engine(v, where)


def _resolve_options(config: pytest.Config) -> Options:
    o = Options()
    o.engine = _engine(config)
    targets = config.option.graphsafe_targets
    if targets is None:
        targets = config.getini("graphsafe_targets") or []
    o.targets = frontend.expand_targets(targets)
    v, where = _raw(config, "examples")
    o.examples = None if v is None else frontend.parse_int(v, where)
    v, where = _raw(config, "steps")
    o.steps = None if v is None else frontend.parse_int(v, where)
    v, where = _raw(config, "capture_sizes")
    o.capture_sizes = None if v is None else frontend.parse_sizes(v, where)
    v, where = _raw(config, "probes")
    if o.targets or v is not None:
        o.probes = frontend.parse_probes(v, where or "probes")
    v, where = _raw(config, "profile")
    try:
        o.profile = frontend.profile_name(v)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    v, where = _raw(config, "isolate")
    if v is not None:
        o.isolate = frontend.parse_isolate(v, where)
    v, where = _raw(config, "timeout")
    if v is not None:
        o.timeout = frontend.parse_timeout(v, where)
    v, where = _raw(config, "report_dir")
    if v is not None:
        base = config.invocation_params.dir
        if where.startswith("ini") and config.inipath is not None:
            base = config.inipath.parent
        # absolute, so that every xdist worker writes to the same directory
        o.report_dir = str((Path(base) / os.path.expanduser(str(v))).resolve())
    return o


# -- early set-up ----------------------------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # Before conftest files import kernel modules: switch Triton to its interpreter when
    # the engine will be the emulator.  pytest_configure repeats this for late registration.
    # config.option is not filled in yet; the known args are.
    value = getattr(early_config.known_args_namespace, "graphsafe_engine", None)
    if value is None:
        value = _raw(early_config, "engine")[0]
    try:
        engine = "auto" if value is None else frontend.parse_engine(value)
    except ConfigError:
        return  # reported as a usage error by pytest_configure
    frontend.prepare_engine(engine)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "graphsafe(**kwargs): defaults for the graphsafe fixture's check() calls in this test "
        "(engine, examples, steps, probes, capture_sizes, report_dir, profile, seed, spec, ...)",
    )
    # graphsafe's CUDA pre-screen turns on torch's sync debug mode, which warns that it is a prototype
    config.addinivalue_line("filterwarnings", "ignore:Synchronization debug mode is a prototype feature:UserWarning")
    try:
        opts = _resolve_options(config)
    except ConfigError as e:
        raise pytest.UsageError(f"graphsafe: {e}") from None
    config.stash[_OPTIONS] = opts
    _group_by_target(config, opts)
    frontend.register_profiles()
    frontend.prepare_engine(opts.engine)


def pytest_unconfigure(config: pytest.Config) -> None:
    sandbox.close_all()  # xdist workers may leave through os._exit, skipping atexit


_DEVICE = pytest.StashKey[object]()


def _select_device(config: pytest.Config, engine: str) -> None:
    """Once per process, before graphsafe's first check: xdist worker gwN takes GPU N % count.

    Done lazily rather than in pytest_configure so that test runs that never call
    graphsafe do not get a CUDA context (or a changed current device) from the plugin.
    """
    if engine != "emulate" and _DEVICE not in config.stash:
        config.stash[_DEVICE] = assign_device(engine)


def _options(config: pytest.Config) -> Options:
    opts = config.stash.get(_OPTIONS, None)
    if opts is None:  # the plugin was registered after pytest_configure ran
        opts = _resolve_options(config)
        config.stash[_OPTIONS] = opts
    return opts


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    opts = config.stash.get(_OPTIONS, None)
    if opts is None or not opts.targets:
        return None
    short = opts.profile.removeprefix("graphsafe-")
    lines = [
        f"graphsafe: {len(opts.targets)} target(s), engine {opts.engine}, profile {short}, "
        f"{opts.effective_examples} examples, probes {','.join(opts.probes)}"
        + (f", reports in {opts.report_dir}" if opts.report_dir else "")
        + (f", one process per target (timeout {opts.timeout:g}s)" if opts.isolate == "target" else ", no isolation")
    ]
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 1 and opts.engine in ("auto", "cuda"):
        import torch

        hint = gpu_sharing_hint(workers, torch.cuda.device_count() if torch.cuda.is_available() else 0)
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
    return (
        f"graphsafe: {workers} workers share {gpus} GPU(s); the GPU time-slices between processes, so "
        "workers beyond one per GPU add little speed unless MPS is running (benchmarks/gpu_sharing.py)"
    )


# -- collection --------------------------------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: the items exist before -k/-m/--deselect filter the list.
    if not _options(config).targets:
        return
    collector = GraphsafeCollector.from_parent(session, name="graphsafe", nodeid="graphsafe")
    # genitems reports the collector like any other, so "collected N items" counts these
    items.extend(session.genitems(collector))


class GraphsafeCollector(pytest.Collector):
    """Items for every ``--graphsafe`` target; identical on every xdist worker (no randomness)."""

    def collect(self):
        opts = _options(self.config)
        for target in opts.targets:
            yield from self._items_for(target, opts)

    def _items_for(self, target: str, opts: Options):
        from .checker import TargetError, resolve_target, validate_target
        from .contract import CaptureSpec

        try:
            cls, _ = resolve_target(target)
            validate_target(cls)
            spec = getattr(cls, "default_spec", None) or CaptureSpec()
        except TargetError as e:
            yield GraphsafeItem.from_parent(self, name=f"graphsafe[{target}]", target=target, problem=frontend.one_line(e))
            return
        except Exception as e:  # importing the target raised something unexpected
            yield GraphsafeItem.from_parent(
                self, name=f"graphsafe[{target}]", target=target,
                problem=frontend.one_line(f"target {target!r} cannot be loaded: {type(e).__name__}: {e}"),
            )
            return
        sizes = opts.capture_sizes or spec.default_capture_sizes()
        fitting = [s for s in sizes if s <= spec.max_reqs]
        if not fitting:
            yield GraphsafeItem.from_parent(
                self, name=f"graphsafe[{target}]", target=target,
                problem=f"{target}: no capture size in {list(sizes)} fits its spec (max_reqs={spec.max_reqs})",
            )
            return
        for probe in opts.probes:
            for size in fitting:
                yield GraphsafeItem.from_parent(
                    self, name=f"graphsafe[{target}-{probe}-{size}]", target=target, probe=probe, size=size, target_cls=cls,
                )


_ORDER = pytest.StashKey[dict]()


def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    # While this item runs, the sandboxes of the next items' targets import torch and their
    # targets in the background: start-up overlaps the current check instead of following it.
    for upcoming in _upcoming_targets(item, nextitem):
        upcoming.prestart(item)
    return None  # a firstresult hook: let pytest run the item


def _upcoming_targets(item: pytest.Item, nextitem: pytest.Item | None) -> list["GraphsafeItem"]:
    """The next items of other targets whose sandboxes may start now (at most the live-process limit).

    Under xdist only ``nextitem`` is known to be this worker's; otherwise the
    session runs ``session.items`` in order.
    """
    if not isinstance(nextitem, GraphsafeItem):
        return []
    from ._internal.xdist import worker_id

    if worker_id() is not None or sandbox.MAX_LIVE < 3:
        return [nextitem]
    order = item.config.stash.get(_ORDER, None)
    if order is None:
        order = item.config.stash[_ORDER] = {id(it): i for i, it in enumerate(item.session.items)}
    i = order.get(id(nextitem))
    if i is None:
        return [nextitem]
    out: list[GraphsafeItem] = []
    seen = {getattr(item, "target", None)}
    for it in item.session.items[i:]:
        if len(out) >= sandbox.MAX_LIVE - 1 or not isinstance(it, GraphsafeItem):
            break
        if it.target not in seen:
            seen.add(it.target)
            out.append(it)
    return out


def _group_by_target(config: pytest.Config, opts: Any) -> None:
    """Under ``-n`` with xdist's default ``--dist load``, switch to ``loadgroup`` for graphsafe items.

    Items of one target share a sandbox process, capture sessions and compiled kernels; spread
    over every worker, each worker would start, capture and compile everything again.  An explicit
    ``--dist`` on the command line is left alone.
    """
    if not getattr(opts, "targets", None) or not getattr(config.option, "numprocesses", None):
        return
    explicit = any(a == "--dist" or a.startswith("--dist=") or a == "-d" for a in config.invocation_params.args)
    if not explicit and getattr(config.option, "dist", None) in ("load", "no"):
        config.option.dist = "loadgroup"


class GraphsafeFailure(Exception):
    """A check found something; carries the text a failing item prints."""


class _TargetProblem(Exception):
    """The target cannot be checked; the message is one line."""


class GraphsafeItem(pytest.Item):
    """One ``graphsafe.check(target, probes=[probe], capture_sizes=[size])``."""

    def __init__(self, *, target: str, probe: str = "", size: int = 0, target_cls: type | None = None,
                 problem: str | None = None, **kwargs: Any):
        kwargs.setdefault("nodeid", kwargs["name"])  # "graphsafe[...]", not "graphsafe::graphsafe[...]"
        super().__init__(**kwargs)
        self.target, self.probe, self.size, self.cls, self.problem = target, probe, size, target_cls, problem
        self.result = None
        self.add_marker("graphsafe")
        # one xdist group per target: its items share one worker (and its sandbox, sessions, kernels)
        self.add_marker(pytest.mark.xdist_group(name=target))

    def runtest(self) -> None:
        if self.problem:
            raise _TargetProblem(self.problem)
        opts = _options(self.config)
        problem = frontend.engine_problem(opts.engine)
        if problem:
            raise _TargetProblem(problem)
        label = f"{self.target} [probe {self.probe}, capture size {self.size}]"
        kwargs: dict[str, Any] = dict(
            probes=[self.probe],
            capture_sizes=[self.size],
            examples=opts.effective_examples,
            steps=opts.steps,
            report_dir=opts.report_dir,
        )
        target = self.cls or self.target
        if opts.isolate == "target":
            self.result = _check_isolated(target, self.target, label, opts.engine, opts.profile, opts.timeout, kwargs)
        else:
            self.result = _check_in_process(self.config, target, self.target, label, self.nodeid, opts.engine,
                                            opts.profile, kwargs)
        if not self.result.ok:
            raise GraphsafeFailure(frontend.failure_text(self.result, label))

    def prestart(self, previous: pytest.Item | None = None) -> None:
        """Start this item's sandbox process in the background (isolated runs only)."""
        if self.problem or (isinstance(previous, GraphsafeItem) and previous.target == self.target):
            return
        opts = _options(self.config)
        if opts.isolate != "target" or frontend.engine_problem(opts.engine):
            return
        try:
            box = sandbox.get_sandbox(self.cls or self.target, engine=opts.engine,
                                      device=sandbox.worker_device(opts.engine))
            box.start(wait=False)
        except Exception:  # noqa: BLE001 - the item's own check reports whatever this was
            pass

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GraphsafeFailure):
            return str(excinfo.value)
        if isinstance(excinfo.value, _TargetProblem):
            return f"graphsafe: {excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        # point at the target class when it is known, so -vv shows where the backend lives
        if self.cls is not None:
            try:
                return Path(inspect.getfile(self.cls)), inspect.getsourcelines(self.cls)[1] - 1, self.name
            except (TypeError, OSError):
                pass
        return self.path, None, self.name


# -- running one check: in a sandbox, or here ---------------------------------------------------
_CUDA_BROKEN = pytest.StashKey[str]()


def _isolation_text(label: str, e: Exception) -> str:
    """One line for an item whose sandbox crashed or timed out."""
    return (f"{label}: {e.what}. It ran in a process of its own: other targets were not affected, "
            "and this target's next check starts a fresh process")


def _check_isolated(target: Any, name: str, label: str, engine: str, profile: str, timeout: float,
                    kwargs: dict[str, Any]):
    """``graphsafe.check`` in ``target``'s sandbox; crashes, hangs and contract errors become one line."""
    box = sandbox.get_sandbox(target, engine=engine, device=sandbox.worker_device(engine))
    try:
        return box.check(timeout, profile=profile, **kwargs)
    except (sandbox.SandboxCrashed, sandbox.SandboxTimeout) as e:
        raise _TargetProblem(_isolation_text(label, e)) from None
    except Exception as e:
        msg = frontend.contract_message(e, name)
        if msg is None:
            raise  # a graphsafe bug: show the traceback (the child's is in the notes)
        raise _TargetProblem(msg) from None


def _check_in_process(config: pytest.Config, target: Any, name: str, label: str, who: str, engine: str,
                      profile: str, kwargs: dict[str, Any]):
    """``graphsafe.check`` in this process; after a failure on CUDA, probe the context.

    Once a check has left the CUDA context unusable every later CUDA check of
    this process would fail with a cascade of unrelated tracebacks: they fail
    fast instead, naming the item that broke it.
    """
    cuda = frontend.uses_cuda(engine)
    broken = config.stash.get(_CUDA_BROKEN, None) if cuda else None
    if broken is not None:
        raise _TargetProblem(f"CUDA context broken by {broken}; rerun with --graphsafe-isolate target")
    _select_device(config, engine)
    failed = True
    try:
        with frontend.hypothesis_profile(profile):
            result = frontend.run_check(target, engine=engine, **kwargs)
        failed = not result.ok
        return result
    except Exception as e:
        msg = frontend.contract_message(e, name)
        failed = False  # the context is probed here, once
        if cuda and not sandbox.cuda_context_ok():
            config.stash[_CUDA_BROKEN] = who
        if msg is None and cuda and config.stash.get(_CUDA_BROKEN, None) == who:
            first = str(e).strip().splitlines()
            raise _TargetProblem(
                f"{label}: the check raised {type(e).__name__}: {first[0] if first else ''}, and this process's "
                "CUDA context was unusable afterwards; the remaining CUDA checks of this process will fail: "
                "rerun with --graphsafe-isolate target"
            ) from None
        if msg is None:
            raise  # a graphsafe bug: show the traceback
        raise _TargetProblem(msg) from None
    finally:
        if failed and cuda and _CUDA_BROKEN not in config.stash and not sandbox.cuda_context_ok():
            config.stash[_CUDA_BROKEN] = who


# -- fixture and marker ------------------------------------------------------------------------
class GraphsafeFixture:
    """What the ``graphsafe`` fixture returns.

    ``check(target, **kwargs)`` calls :func:`graphsafe.check` with the run's
    defaults (engine, examples, steps, report dir, profile), overridden by the
    test's ``@pytest.mark.graphsafe(...)`` keywords and then by ``kwargs``.  It
    fails the test with the findings (no traceback) when the result is not ok
    and returns the :class:`graphsafe.CheckResult` otherwise.  ``profile`` may be
    ``fast``, ``ci`` or ``thorough``.  ``isolate="target"`` runs the check in the
    target's own process (``timeout`` seconds at most, default
    ``--graphsafe-timeout``); the default, ``"none"``, runs it in the test's process.
    """

    def __init__(self, defaults: dict[str, Any], config: pytest.Config | None = None):
        self.defaults = dict(defaults)
        self.results: list[Any] = []
        self._config = config

    def check(self, target: Any, **kwargs: Any):
        params = {**self.defaults, **kwargs}
        try:
            profile = frontend.profile_name(params.pop("profile", None))
            params["engine"] = frontend.parse_engine(params.get("engine") or "auto")
            isolate = frontend.parse_isolate(params.pop("isolate", None) or "none", "isolate")
            timeout = params.pop("timeout", None)
            timeout = frontend.DEFAULT_TIMEOUT_S if timeout is None else frontend.parse_timeout(timeout, "timeout")
        except ConfigError as e:
            pytest.fail(f"graphsafe: {e}", pytrace=False)
        if params.get("examples") is None:
            params["examples"] = frontend.default_examples(profile)
        problem = frontend.engine_problem(params["engine"])
        if problem:
            pytest.fail(f"graphsafe: {problem}", pytrace=False)
        if isolate == "target":
            return self._check_isolated(target, profile, timeout, params)
        if self._config is not None:
            _select_device(self._config, params["engine"])
        msg = None
        try:
            with frontend.hypothesis_profile(profile):
                result = frontend.run_check(target, **params)
        except Exception as e:
            msg = frontend.contract_message(e, target)
            if msg is None:
                raise
        if msg is not None:  # outside the except block: no chained traceback in the report
            pytest.fail(f"graphsafe: {msg}", pytrace=False)
        self.results.append(result)
        if not result.ok:
            pytest.fail(frontend.failure_text(result), pytrace=False)
        return result

    def _check_isolated(self, target: Any, profile: str, timeout: float, params: dict[str, Any]):
        engine = params.pop("engine")
        name = target if isinstance(target, str) else getattr(target, "__qualname__", repr(target))
        msg = None
        try:
            result = _check_isolated(target, name, name, engine, profile, timeout, params)
        except _TargetProblem as e:
            msg = str(e)
        if msg is not None:  # outside the except block: no chained traceback in the report
            pytest.fail(f"graphsafe: {msg}", pytrace=False)
        self.results.append(result)
        if not result.ok:
            pytest.fail(frontend.failure_text(result), pytrace=False)
        return result

    def __repr__(self) -> str:
        return f"<graphsafe fixture {self.defaults}>"


@pytest.fixture
def graphsafe(request: pytest.FixtureRequest) -> GraphsafeFixture:
    """Check a target from a test: ``graphsafe.check(MyTarget)`` fails the test on findings."""
    opts = _options(request.config)
    defaults: dict[str, Any] = {
        "engine": opts.engine,
        "examples": opts.examples,
        "steps": opts.steps,
        "report_dir": opts.report_dir,
        "profile": opts.profile,
        "isolate": "none",
        "timeout": opts.timeout,
    }
    # farthest marker first, so the closest (function over class over module) wins
    for mark in reversed(list(request.node.iter_markers("graphsafe"))):
        if mark.args:
            pytest.fail("graphsafe: @pytest.mark.graphsafe takes keyword arguments only, "
                        f"e.g. @pytest.mark.graphsafe(examples=20); got {mark.args!r}", pytrace=False)
        defaults.update(mark.kwargs)
    return GraphsafeFixture(defaults, request.config)

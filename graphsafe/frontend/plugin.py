"""pytest plugin: one test item per target, and a ``graphsafe`` fixture for other test suites.

Loaded through the ``pytest11`` entry point (disable with ``-p no:graphsafe``)::

    pytest -n auto --graphsafe all
    pytest --graphsafe mypkg.attn:MyBackend --graphsafe-examples 200 --graphsafe-report-dir reports

This module holds the options (group ``graphsafe`` in ``pytest --help``) and the hooks, and does
nothing until graphsafe is asked for: it imports neither torch nor triton and leaves
``TRITON_INTERPRET`` alone in a run that does not ask.  Asked for means

* a ``--graphsafe*`` option or a ``graphsafe_*`` ini key: the machinery
  (:mod:`graphsafe.frontend.items`) is imported at start-up, and on a machine without a GPU
  Triton is switched to its interpreter before conftest files and test modules define kernels.
  Not in pytest-xdist's controller (:func:`xdist_controller`), which runs no item: it imports
  nothing heavy at start-up, spawns its workers (each of which does the above), and only then
  resolves the options and prints the header (``pytest_runtestloop``), so that its own torch
  import delays no worker;
* the ``graphsafe`` fixture (with its ``@pytest.mark.graphsafe(...)`` keywords): the machinery is
  imported at the fixture's first use, and the interpreter switched on then, which is too late for
  kernels defined at collection (a warning says so, and how to ask at start-up instead).

Every ``--graphsafe`` target becomes one item, ``graphsafe[<target>]``, collected after the run's
ordinary tests (:mod:`graphsafe.frontend.items`): one check with every selected probe and capture
size, captured once, in a process of its own by default (``--graphsafe-isolate target``).  Items of
different targets are independent, so ``pytest -n K`` spreads targets over workers.

Options (ini key in brackets; the command line wins): ``--graphsafe TARGET`` [``graphsafe_targets``],
``--graphsafe-engine``, ``--graphsafe-examples``, ``--graphsafe-steps``, ``--graphsafe-capture-sizes``,
``--graphsafe-capture``, ``--graphsafe-probes``, ``--graphsafe-report-dir``, ``--graphsafe-profile``,
``--graphsafe-isolate``, ``--graphsafe-timeout``, ``--graphsafe-database``, ``--graphsafe-shard``
[``graphsafe_<name>``], ``--graphsafe-audit``.  They are resolved with every other front end's in
:mod:`graphsafe.frontend.options`.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import Any

import pytest

from .. import defaults

__all__ = ["graphsafe", "asked", "xdist_controller", "xdist_worker", "visible_gpus"]

#: the options that take a value: ``--graphsafe-<name>`` and the ini key ``graphsafe_<name>``
_VALUED = {
    "engine": ("ENGINE", "auto (default: cuda when a GPU is visible, else emulate), cuda or emulate"),
    "examples": (
        "N",
        "Hypothesis examples per target (default: by profile, "
        + ", ".join(f"{k} {n}" for k, (_, n) in defaults.PROFILES.items())
        + ")",
    ),
    "steps": ("N", f"most batches per drawn step sequence (default {defaults.STEPS})"),
    "capture_sizes": ("1,2,4", "capture sizes to test (default: each target's default_spec sizes)"),
    "capture": (
        "POLICIES",
        f"how graphs are captured: {defaults.CAPTURE} (default: worst, ascending, minimal and "
        "drawn batches) or some of worst, ascending, minimal, drawn",
    ),
    "probes": ("P1,P2", "finding kinds to report (default: all)"),
    "report_dir": ("DIR", "write a report for each finding under DIR (default: no reports)"),
    "profile": (
        "PROFILE",
        f"Hypothesis profile for graphsafe checks: {', '.join(defaults.PROFILES)} "
        "(default: ci when $CI is true, else fast)",
    ),
    "isolate": (
        "MODE",
        "target (default): each target's check in a process of its own, so that a crash, "
        "hang or broken CUDA context fails only that target; none: in the pytest process",
    ),
    "timeout": ("SECONDS", f"stop a target's check after SECONDS (default {defaults.TIMEOUT_S:g})"),
    "database": (
        "DB",
        "Hypothesis example database: a directory or a redis://host:port/db URL, shared by every worker "
        "and machine (default: $GRAPHSAFE_DB, else .hypothesis/graphsafe unless the profile keeps none)",
    ),
    "shard": (
        "K/N",
        "run shard K of N of the targets (a CI matrix): every target falls in exactly one shard, "
        "balanced by the durations recorded in pytest's cache",
    ),
}
_ASKED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphsafe", "graphsafe: CUDA-graph capture checks")
    group.addoption(
        "--graphsafe",
        action="append",
        dest="graphsafe_targets",
        default=None,
        metavar="TARGET",
        help="check TARGET ('module:Class', a registered name, or 'all'); repeatable. One item per target.",
    )
    for name, (metavar, text) in _VALUED.items():
        flag = "--graphsafe-" + name.replace("_", "-")
        group.addoption(flag, dest=f"graphsafe_{name}", default=None, metavar=metavar, help=text)
        parser.addini(f"graphsafe_{name}", f"like {flag}", default="")
    group.addoption(
        "--graphsafe-audit",
        action="store_true",
        dest="graphsafe_audit",
        default=None,
        help="audit each target instead of checking it: every batch kind under worst-case and minimal "
        "capture; an item fails when the declared support level is higher than the safe one",
    )
    parser.addini(
        "graphsafe_audit", "audit the targets instead of checking them (true/false)", type="bool", default=False
    )
    parser.addini("graphsafe_targets", "targets to check (one per line), like --graphsafe", type="linelist", default=[])


def asked(config: pytest.Config, early: bool = False) -> bool:
    """True when a ``--graphsafe*`` option or a ``graphsafe_*`` ini key is given (``early``: from the
    known arguments, before ``config.option`` is filled in)."""
    ns = config.known_args_namespace if early else config.option
    names = ["targets", "audit", *_VALUED]
    if any(getattr(ns, f"graphsafe_{name}", None) is not None for name in names):
        return True
    for name in names:
        try:
            value = config.getini(f"graphsafe_{name}")
        except (ValueError, KeyError):  # the plugin registered after the ini was read
            continue
        if value not in (None, "", [], False):
            return True
    return False


def _items() -> ModuleType:
    """The plugin's machinery, imported once graphsafe is asked for."""
    from . import items  # torch, triton and the checker: only at first use, never in a run that does not ask

    return items


def _active(config: pytest.Config) -> bool:
    return config.stash.get(_ASKED, False)


def _early(config: pytest.Config, name: str) -> Any:
    """An option as given at start-up (command line, then ini), before it is resolved: None if not given."""
    value = getattr(config.known_args_namespace, f"graphsafe_{name}", None)
    if value is None:
        try:
            value = config.getini(f"graphsafe_{name}")
        except (ValueError, KeyError):
            return None
    return value if value not in ("", []) else None


def xdist_worker(config: pytest.Config) -> bool:
    """True in a pytest-xdist worker (set before the worker's first hook; ``workerinput`` only later)."""
    return bool(os.environ.get("PYTEST_XDIST_WORKER")) or hasattr(config, "workerinput")


def xdist_controller(config: pytest.Config, early: bool = False) -> bool:
    """True in pytest-xdist's controller: the process that spawns workers, hands them the items and
    runs none itself.  Not with ``-n 0``, ``-p no:xdist`` or ``--collect-only`` (pytest's own
    process then collects and runs), nor in a worker.

    ``early``: from the known arguments, before xdist's ``pytest_cmdline_main`` turns ``-n K`` into
    ``--tx``; ``-n auto`` counts as a controller unless it comes to 0 workers (``--pdb``, or
    ``PYTEST_XDIST_AUTO_NUM_WORKERS=0``).  Later, what xdist decides (``--dist`` and ``--tx``)."""
    if xdist_worker(config):
        return False
    ns = config.known_args_namespace if early else config.option
    if getattr(ns, "collectonly", False):
        return False
    if early:
        n = getattr(ns, "numprocesses", None)
        if n in ("auto", "logical"):
            return not getattr(ns, "usepdb", False) and os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") != "0"
        if n is not None:
            return n > 0
        dist = "load" if getattr(ns, "distload", False) else getattr(ns, "dist", "no")
    else:
        dist = getattr(ns, "dist", "no")
    return dist not in (None, "no") and bool(getattr(ns, "tx", None))


def _start_server_early(config: pytest.Config) -> None:
    """Start the sandboxes' fork server before this process imports torch, where items will run here in
    sandboxes: pytest's own process without xdist, or an xdist worker (not the controller, which runs
    no item).  A guess from the options as given: ``items.configure`` resolves them, and the server
    checks its guess then (:func:`graphsafe.frontend.sandbox.server.start_early`)."""
    isolate = _early(config, "isolate") or "target"
    if (
        getattr(config.known_args_namespace, "collectonly", False)
        or isolate != "target"
        or not _early(config, "targets")
    ):
        return
    from .sandbox import server  # no torch: the server imports it, while this process imports its own

    server.start_early(str(_early(config, "engine") or defaults.ENGINE))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    # Before conftest files import kernel modules: the engine decides whether Triton runs interpreted.
    # xdist's controller runs no item: it imports nothing heavy here (its workers do this themselves).
    if asked(early_config, early=True) and not xdist_controller(early_config, early=True):
        _start_server_early(early_config)
        _items().prepare_early(early_config)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "graphsafe(**kwargs): options for the graphsafe fixture's checks in this test "
        "(engine, examples, steps, probes, capture_sizes, report_dir, profile, ...)",
    )
    if not asked(config):
        return
    config.stash[_ASKED] = True
    if _early(config, "targets") and not xdist_worker(config):  # where every report arrives: see schedule
        from . import schedule  # no torch

        config.pluginmanager.register(schedule.DurationRecorder(config), "graphsafe-durations")
    if not xdist_controller(config):  # the controller resolves the options once its workers start
        _items().configure(config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """xdist's controller, its workers just spawned (in xdist's ``pytest_sessionstart``): resolve the
    options here, importing torch while the workers start, and print the header lines.  A bad option is
    a usage error (exit code 4) before xdist's loop reads any worker's event, so the workers, which
    fail on it too, are torn down without a word."""
    config = session.config
    if _active(config) and xdist_controller(config):
        lines = _items().configure_controller(config)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and reporter.showheader and not reporter.no_header:  # as pytest's header
            for line in lines:
                reporter.write_line(line)
    return None  # a firstresult hook: xdist's loop runs next


def pytest_unconfigure(config: pytest.Config) -> None:
    sandbox = sys.modules.get("graphsafe.frontend.sandbox")  # only if something started sandboxes
    if sandbox is not None:
        sandbox.close_all()  # xdist workers may leave through os._exit, skipping atexit


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    # xdist's controller prints them later, once its options are resolved (pytest_runtestloop)
    return _items().header(config) if _active(config) and not xdist_controller(config) else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: the items exist before -k/-m/--deselect filter the list.
    if _active(config):
        _items().collect(session, config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    if _active(node.config):  # xdist's controller, for each worker
        from . import schedule  # no torch

        schedule.configure_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` with graphsafe's targets on CUDA: one worker per visible GPU (a GPU time-slices between
    processes, see :func:`graphsafe.frontend.items.gpu_sharing_hint`).  None (xdist's own count: the CPU
    cores) on the emulator, without a GPU, or when no target is asked for."""
    if not asked(config) or not _early(config, "targets"):
        return None
    if str(_early(config, "engine") or defaults.ENGINE).strip().lower() == "emulate":
        return None
    return visible_gpus() or None


def visible_gpus(driver: str = "/proc/driver/nvidia/gpus") -> int:
    """NVIDIA GPUs this process may use, without importing torch (xdist's controller must not): the
    driver's count (a folder per GPU in ``driver``), cut down to ``CUDA_VISIBLE_DEVICES`` where it is set."""
    try:
        present = len(os.listdir(driver))
    except OSError:  # no NVIDIA driver here
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    count = 0
    for entry in visible.split(","):  # CUDA stops at the first entry that is not a device
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        count += 1
    return min(count, present)


def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _active(item.config):
        _items().prestart_upcoming(item, nextitem)
    return None  # a firstresult hook: let pytest run the item


@pytest.fixture
def graphsafe(request: pytest.FixtureRequest) -> Any:
    """Check a target from a test: ``graphsafe.check(MyTarget)`` fails the test on findings
    (:class:`graphsafe.frontend.fixture.GraphsafeFixture`)."""
    return _items().fixture_for(request)

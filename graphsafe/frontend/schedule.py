"""The order graphsafe's items run in, so that pytest-xdist's workers end together.

xdist's default ``--dist load`` hands the collected items out in order: each worker first gets a
chunk of consecutive items (two, for a suite of a few dozen), then one more each time it finishes
one, so that it always holds the item it runs and the next.  Targets differ in length by an order
of magnitude, and the order decides how long the last worker runs alone:

* longest expected first (longest processing time first) for the items handed out one at a time;
* but the first chunks each hold one of the k longest targets followed by the shortest ones: plain
  longest-first would give the first worker the two longest targets, the second stuck behind the
  first.  (Simulating xdist's scheduler over durations drawn from a wide distribution, this order
  ended within 2 to 7 % of the best possible time; plain longest-first up to 60 % over it.)

The k workers come from xdist (``PYTEST_XDIST_WORKER_COUNT``); without xdist, or with other tests
collected before graphsafe's items (they take the first chunks), the order is plain longest-first.

A target's expected length is

1. its duration in an earlier run on the same engine, kept in pytest's cache under
   :data:`CACHE_KEY` (when the cache provider is on; written by the process that sees every report:
   the xdist controller, or pytest's own process without xdist);
2. without one, the median recorded duration of the targets of its kind (or the longest recorded
   duration, when none of its kind has one: a new target may be long);
3. with no durations at all, its kind: a buggy variant (its ``expected`` names a finding kind)
   first, then a target expected to pass (a fixed reference variant, or any target that does not
   say), then a target that cannot be resolved (an error at once).  Buggy first because that is
   what the reference suite measured: a buggy variant stops drawing at its first finding, but then
   Hypothesis shrinks it and every shrink step runs the diagnosis, which on the emulator took 3 to
   335 s per buggy variant (mean 76 s) against 10 to 21 s for the fixed ones that run every example
   (``--graphsafe all``, 10 examples, 2 cores).

Ties keep the given order.  The order depends only on the targets, the durations and the number of
workers, and an xdist worker takes the durations the controller read (handed over in its
``workerinput``), not its own cache (a worker on another host has another one), so every worker
collects the same list.

The controller's part (:func:`configure_node`, :class:`DurationRecorder`) imports neither torch nor
the checker: the controller hands over every engine's durations and each worker picks its own, and
each item names its engine in its report (the ``graphsafe_engine`` user property).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pytest is the test extra's: the command line shards without it
    import pytest

__all__ = [
    "CACHE_KEY",
    "WORKER_KEY",
    "ENGINE_PROPERTY",
    "kind_of",
    "longest_first",
    "expected_seconds",
    "shard",
    "engine_key",
    "history",
    "configure_node",
    "DurationRecorder",
]

#: pytest cache key: {engine: {target: seconds}}
CACHE_KEY = "graphsafe/durations"
#: the ``workerinput`` key under which the xdist controller hands its {engine: {target: seconds}} to each worker
WORKER_KEY = "graphsafe_durations"
#: the user property in which each graphsafe item reports its engine's key (:func:`engine_key`)
ENGINE_PROPERTY = "graphsafe_engine"

PASSES, FINDS, ERROR = "passes", "finds", "error"
#: relative lengths by kind when no duration was ever recorded (see the module docstring)
_PRIOR = {FINDS: 2.0, PASSES: 1.0}  # an error runs first (expected() gives it -1)


def kind_of(target: str) -> str:
    """``passes``, ``finds`` or ``error`` (see the module docstring) for a target name."""
    from ..checker import resolve_target  # torch: only where items are collected

    try:
        cls, _ = resolve_target(target)
    except Exception:  # noqa: BLE001 - whatever it is, the item reports it at once
        return ERROR
    return PASSES if getattr(cls, "expected", None) is None else FINDS


def expected_seconds(targets: list[str], kinds: dict[str, str], history: dict[str, float]) -> dict[str, float]:
    """Each target's expected length (see the module docstring): recorded seconds, else the median of its
    kind's, else the longest recorded; with nothing recorded, its kind's prior; -1 for an error."""
    timed = {
        t: float(history[t])
        for t in targets
        if kinds.get(t) != ERROR and isinstance(history.get(t), (int, float)) and not isinstance(history.get(t), bool)
    }

    def expected(target: str) -> float:
        kind = kinds.get(target, PASSES)
        if kind == ERROR:
            return -1.0
        if target in timed:
            return timed[target]
        if not timed:
            return _PRIOR[kind]
        same = [s for t, s in timed.items() if kinds.get(t, PASSES) == kind]  # only targets of this run
        return statistics.median(same) if same else max(timed.values())

    return {t: expected(t) for t in targets}


def longest_first(
    targets: list[str], kinds: dict[str, str], history: dict[str, float], workers: int = 1, others: int = 0
) -> list[str]:
    """``targets`` in the order they should run for ``workers`` xdist workers, with ``others`` other
    items collected before them (see the module docstring)."""
    cost = expected_seconds(targets, kinds, history)
    ranked = [t for _, t in sorted(enumerate(targets), key=lambda p: (-cost[p[1]], p[0]))]
    return _first_chunks(ranked, workers) if workers > 1 and not others else ranked


def shard(targets: list[str], kinds: dict[str, str], history: dict[str, float], index: int, count: int) -> list[str]:
    """The targets of shard ``index`` of ``count`` (1-based), in the given order.

    Every target falls in exactly one shard: longest expected first (ties by name, so the order the
    targets were given in does not matter), each to the shard with the least expected time so far
    (ties: the lowest shard).  With nothing recorded, the kinds' priors stand in, which deals the
    targets of each kind round-robin by name.  The split depends only on the targets, their kinds and
    ``history``: every shard of a CI matrix must see the same durations (the same pytest cache, or none).
    """
    if not 1 <= index <= count:
        raise ValueError(f"shard {index} of {count}: the index runs from 1 to the count")
    cost = expected_seconds(targets, kinds, history)
    load = [0.0] * count
    mine: set[str] = set()
    for t in sorted(set(targets), key=lambda t: (-cost[t], t)):
        lightest = min(range(count), key=lambda i: (load[i], i))
        load[lightest] += max(cost[t], 0.0)
        if lightest == index - 1:
            mine.add(t)
    return [t for t in targets if t in mine]


def _first_chunks(ranked: list[str], workers: int) -> list[str]:
    """Longest first, but each worker's first chunk (as xdist's ``load`` cuts it) is one of the
    longest targets followed by the shortest."""
    if len(ranked) < 2 * workers:  # xdist deals one item to each worker in turn: pair long with short
        return ranked[:workers] + ranked[workers:][::-1]
    chunk = max(2, len(ranked) // workers // 4)
    first, rest = [], list(ranked)
    for _ in range(workers):
        if len(rest) < chunk:
            break
        first.append(rest.pop(0))
        first += [rest.pop() for _ in range(chunk - 1)]
    return first + rest


def engine_key(engine: Any) -> str:
    """The durations' key for checks on ``engine`` here: ``cuda`` or ``emulate`` (imports torch)."""
    from .devices import uses_cuda  # torch: only in workers and pytest's own process, never the controller

    return "cuda" if isinstance(engine, str) and uses_cuda(engine) else "emulate"


def _cached(config: pytest.Config) -> dict[str, Any]:
    """{engine: {target: seconds}} from pytest's cache ({} without one)."""
    cache = getattr(config, "cache", None)  # none with -p no:cacheprovider
    data = cache.get(CACHE_KEY, {}) if cache is not None else {}
    return data if isinstance(data, dict) else {}


def history(config: pytest.Config, engine: Any) -> dict[str, float]:
    """Seconds per target from an earlier run on ``engine`` ({} without pytest's cache); in an xdist
    worker, from what the controller handed over."""
    workerinput = getattr(config, "workerinput", None)
    data = workerinput.get(WORKER_KEY) if workerinput is not None else _cached(config)
    got = data.get(engine_key(engine)) if isinstance(data, dict) else None
    return dict(got) if isinstance(got, dict) else {}


def configure_node(node: Any) -> None:
    """xdist's controller, for each worker: every engine's durations it read, so that every worker (on
    any host) orders alike; the worker picks its engine's (:func:`history`)."""
    node.workerinput[WORKER_KEY] = _cached(node.config)


class DurationRecorder:
    """Adds up each graphsafe item's phases as reports arrive; stores them in the cache at the end,
    under the engine key the reports carry (:data:`ENGINE_PROPERTY`).

    Registered only where every report arrives and the cache exists: not in xdist workers.
    """

    def __init__(self, config: pytest.Config):
        self.config = config
        self.seconds: dict[str, float] = {}
        self.engines: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = report.nodeid
        if name.startswith("graphsafe[") and name.endswith("]"):
            target = name[len("graphsafe[") : -1]
            self.seconds[target] = self.seconds.get(target, 0.0) + float(report.duration or 0.0)
            engine = dict(report.user_properties).get(ENGINE_PROPERTY)
            if isinstance(engine, str):
                self.engines[target] = engine

    def pytest_sessionfinish(self) -> None:
        cache = getattr(self.config, "cache", None)  # none with -p no:cacheprovider
        recorded: dict[str, dict[str, float]] = {}
        for target, seconds in self.seconds.items():
            engine = self.engines.get(target)  # none: the item never reported its engine
            if engine is not None:
                recorded.setdefault(engine, {})[target] = round(seconds, 3)
        if cache is None or not recorded:
            return
        data = _cached(self.config)
        for engine, times in recorded.items():
            earlier = data.get(engine)
            data[engine] = {**(earlier if isinstance(earlier, dict) else {}), **times}
        cache.set(CACHE_KEY, data)

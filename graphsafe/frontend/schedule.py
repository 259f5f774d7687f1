"""The order graphsafe's items run in, so that pytest-xdist's workers end together.

xdist's default ``--dist load`` hands the collected items out in order: each worker first gets a
chunk of consecutive items (two, for a suite of a few dozen), then one more each time it finishes
one, so that it always holds the item it runs and the next.  Targets differ in length by an order
of magnitude, and the order decides how long the last worker runs alone:

* longest expected first (longest processing time first) for the items handed out one at a time;
* but the first chunks each hold one of the k longest targets followed by the shortest ones: plain
  longest-first would give the first worker the two longest targets, the second stuck behind the
  first.  (Simulating xdist's scheduler over durations drawn from a wide distribution, this order
  ended within a few hundredths of the best possible time; plain longest-first over half again.)

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
   Hypothesis shrinks it and every shrink step runs the diagnosis, so on the emulator a buggy
   variant took longer than a fixed one that runs every example, and varied more
   (``benchmarks/suite_timeline.py`` measures a suite's timeline).

Ties keep the given order.  The order depends only on the targets, the durations and the number of
workers, and an xdist worker takes the durations the controller read (handed over in its
``workerinput``), not its own cache (a worker on another host has another one), so every worker
collects the same list.

A target expected to pass whose recorded duration exceeds an even share of the run is split into parts
(:func:`split_parts`), items ``graphsafe[<target>#j/k]`` that each run a share of its examples with
seeds of their own (:func:`part_check`); the parts' durations are recorded under the target.  A CI
matrix takes one shard of the targets (:func:`shard`), split by the same expected lengths.

The controller's part (:func:`configure_node`, :class:`DurationRecorder`) imports neither torch nor
the checker: the controller hands over every engine's durations and each worker picks its own, and
each item names its engine in its report (the ``graphsafe_engine`` user property).
"""

from __future__ import annotations

import math
import re
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
    "split_parts",
    "units",
    "part_name",
    "target_of",
    "part_examples",
    "part_check",
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


def split_parts(
    targets: list[str], kinds: dict[str, str], history: dict[str, float], workers: int, examples: int
) -> dict[str, int]:
    """Into how many items (parts, each with its own seeds and a share of the examples) each target's
    check is split for ``workers`` xdist workers.

    A target expected to pass whose recorded duration is longer than an even share of the run (the
    expected total over ``workers``) would end long after the other workers: it is split into as many
    parts as bring each under that share (at most ``workers``, at most ``examples``).  Only targets
    expected to pass: they run every example, while a buggy one stops at its first finding and then
    shrinks it, which every part would repeat.  Only on a recorded duration: each part pays the
    target's start-up and capture again, which a target of unknown length may not be worth.
    """
    if workers < 2:
        return dict.fromkeys(targets, 1)
    cost = expected_seconds(targets, kinds, history)
    share = sum(max(c, 0.0) for c in cost.values()) / workers
    out = {}
    for t in targets:
        recorded = isinstance(history.get(t), (int, float)) and not isinstance(history.get(t), bool)
        long = recorded and kinds.get(t, PASSES) == PASSES and share > 0 and cost[t] > share
        out[t] = min(workers, examples, math.ceil(cost[t] / share)) if long else 1
    return out


def part_name(target: str, part: int, parts: int) -> str:
    """The item name's key of part ``part`` (1-based) of ``parts``: ``target`` alone when not split."""
    return target if parts <= 1 else f"{target}#{part}/{parts}"


_PART = re.compile(r"(?P<target>.+)#(?P<part>\d+)/(?P<parts>\d+)")


def target_of(key: str) -> tuple[str, int, int]:
    """``(target, part, parts)`` of a key :func:`part_name` made (``(key, 1, 1)`` for a whole target)."""
    m = _PART.fullmatch(key)
    return (m["target"], int(m["part"]), int(m["parts"])) if m else (key, 1, 1)


def part_examples(examples: int, part: int, parts: int) -> int:
    """Part ``part``'s share of ``examples``: the shares differ by at most one and add up to ``examples``."""
    return examples // parts + (1 if part <= examples % parts else 0)


def part_check(check: Any, profile: str | None, part: int, parts: int) -> Any:
    """The :class:`~graphsafe.CheckOptions` of part ``part`` of a split check: its share of the examples,
    and seed ``seed + part - 1`` where the parts would otherwise draw the same examples (a seed was given,
    or the Hypothesis ``profile`` is derandomised).  Elsewhere each part draws at random, and keeps the
    example database, which a seed turns off."""
    from hypothesis import settings  # graphsafe's dependency, but not the controller's concern

    derandomised = (settings.get_profile(profile) if profile else settings()).derandomize
    changes: dict[str, Any] = {"examples": part_examples(check.examples, part, parts)}
    if check.seed is not None or derandomised:
        changes["seed"] = (check.seed or 0) + part - 1
    return check.replace(**changes)


def units(
    targets: list[str],
    kinds: dict[str, str],
    history: dict[str, float],
    workers: int = 1,
    others: int = 0,
    examples: int = 1,
) -> list[str]:
    """The items' keys (:func:`part_name`) in the order they should run: each target split as
    :func:`split_parts` says, each part expected to take its share of the target's time, then
    :func:`longest_first`."""
    parts = split_parts(targets, kinds, history, workers, examples)
    cost = expected_seconds(targets, kinds, history)
    keys, unit_kinds, unit_cost = [], {}, {}
    for t in targets:
        for j in range(1, parts[t] + 1):
            key = part_name(t, j, parts[t])
            keys.append(key)
            unit_kinds[key] = kinds.get(t, PASSES)
            unit_cost[key] = cost[t] / parts[t]
    return longest_first(keys, unit_kinds, unit_cost, workers=workers, others=others)


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
            target = target_of(name[len("graphsafe[") : -1])[0]  # a split target's parts add up
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

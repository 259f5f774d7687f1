"""Durations across pytest-xdist (graphsafe/frontend/schedule.py): the controller hands every engine's
durations to each worker, which picks its own, and files reports under the engine they name."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

from graphsafe.frontend import schedule

CACHED = {"cuda": {"flex": 5.0}, "emulate": {"flex": 40.0, "mla_indexer": 90.0}}


class Cache:
    """pytest's cache, in memory."""

    def __init__(self, data: dict | None = None):
        self.data = {} if data is None else {schedule.CACHE_KEY: data}

    def get(self, key, default):
        return self.data.get(key, default)

    def set(self, key, value):
        self.data[key] = json.loads(json.dumps(value))


def report(target: str, seconds: float, engine: str | None):
    props = [("graphsafe_worker", "gw0")] + ([(schedule.ENGINE_PROPERTY, engine)] if engine else [])
    return SimpleNamespace(nodeid=f"graphsafe[{target}]", duration=seconds, user_properties=props)


def test_configure_node_hands_every_engines_durations_to_the_worker():
    node = SimpleNamespace(config=SimpleNamespace(cache=Cache(CACHED)), workerinput={})
    schedule.configure_node(node)
    assert node.workerinput[schedule.WORKER_KEY] == CACHED


def test_configure_node_hands_nothing_without_a_cache():
    node = SimpleNamespace(config=SimpleNamespace(cache=None), workerinput={})
    schedule.configure_node(node)
    assert node.workerinput[schedule.WORKER_KEY] == {}


def test_a_worker_picks_its_engines_durations_from_the_handed_over_dict():
    worker = SimpleNamespace(workerinput={schedule.WORKER_KEY: CACHED}, cache=Cache({"emulate": {"other": 1.0}}))
    assert schedule.history(worker, "emulate") == {"flex": 40.0, "mla_indexer": 90.0}  # not its own cache
    assert schedule.history(worker, "cuda") == {"flex": 5.0}
    assert schedule.history(SimpleNamespace(workerinput={schedule.WORKER_KEY: {}}), "emulate") == {}


def test_the_recorder_files_durations_under_the_engine_its_reports_name():
    cache = Cache({"emulate": {"flex": 40.0}})
    recorder = schedule.DurationRecorder(SimpleNamespace(cache=cache))
    for seconds in (0.5, 2.0, 0.25):  # setup, call, teardown
        recorder.pytest_runtest_logreport(report("flex", seconds, "cuda"))
    recorder.pytest_runtest_logreport(report("mla_indexer", 3.0, "emulate"))
    recorder.pytest_runtest_logreport(SimpleNamespace(nodeid="test_x.py::test_other", duration=9.0, user_properties=[]))
    recorder.pytest_sessionfinish()
    assert cache.get(schedule.CACHE_KEY, None) == {
        "cuda": {"flex": 2.75},
        "emulate": {"flex": 40.0, "mla_indexer": 3.0},  # the earlier run's flex stays
    }


def test_the_recorder_files_nothing_for_reports_without_an_engine():
    cache = Cache()
    recorder = schedule.DurationRecorder(SimpleNamespace(cache=cache))
    recorder.pytest_runtest_logreport(report("flex", 1.0, None))
    recorder.pytest_sessionfinish()
    assert cache.data == {}


CONTROLLER_SIDE = textwrap.dedent(
    """
    import sys
    from types import SimpleNamespace

    from graphsafe.frontend import plugin, schedule

    class Cache:
        def get(self, key, default):
            return {"emulate": {"flex": 1.0}}

        def set(self, key, value):
            self.value = value

    cache = Cache()
    node = SimpleNamespace(config=SimpleNamespace(cache=cache), workerinput={})
    schedule.configure_node(node)
    recorder = schedule.DurationRecorder(SimpleNamespace(cache=cache))
    recorder.pytest_runtest_logreport(
        SimpleNamespace(nodeid="graphsafe[flex]", duration=2.0, user_properties=[("graphsafe_engine", "cuda")])
    )
    recorder.pytest_sessionfinish()
    assert cache.value == {"emulate": {"flex": 1.0}, "cuda": {"flex": 2.0}}, cache.value
    print(sorted(m for m in ("torch", "triton", "graphsafe.checker", "graphsafe.frontend.items") if m in sys.modules))
    """
)


def test_the_controller_side_of_the_plugin_and_the_durations_imports_no_torch():
    out = subprocess.run([sys.executable, "-c", CONTROLLER_SIDE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

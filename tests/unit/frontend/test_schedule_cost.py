"""Scheduling by cost (graphsafe/frontend/schedule.py): items run longest expected first, and the examples of
one slow target that passes are split over the workers, each part with seeds of its own."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import settings

from graphsafe import CheckOptions
from graphsafe.frontend import schedule
from graphsafe.frontend.profiles import register_profiles

#: one slow fixed variant, one slow buggy variant, four short targets (seconds recorded in an earlier run)
HISTORY = {"slow": 60.0, "buggy": 60.0, "a": 5.0, "b": 5.0, "c": 5.0, "d": 5.0}
KINDS = {"slow": "passes", "buggy": "finds", "a": "passes", "b": "passes", "c": "passes", "d": "passes"}


def ends(order: list[str], cost: dict[str, float], workers: int) -> float:
    """When the last of ``workers`` ends, each idle worker taking the next item in ``order``."""
    free = [0.0] * workers
    for key in order:
        i = free.index(min(free))
        free[i] += cost[key]
    return max(free)


def unit_cost(keys: list[str], history: dict[str, float]) -> dict[str, float]:
    return {k: history[t] / n for k in keys for t, _, n in [schedule.target_of(k)]}


def test_a_slow_target_that_passes_is_split_into_parts_that_fit_a_workers_share():
    # total 140 s over 4 workers: a share is 35 s, so the 60 s fixed variant becomes two parts
    assert schedule.split_parts(list(HISTORY), KINDS, HISTORY, workers=4, examples=50)["slow"] == 2


def test_a_slow_buggy_target_is_not_split():
    # each part would find the bug again and shrink it again
    assert schedule.split_parts(list(HISTORY), KINDS, HISTORY, workers=4, examples=50)["buggy"] == 1


def test_a_target_without_a_recorded_duration_is_not_split():
    kinds = {"alone": "passes"}
    assert schedule.split_parts(["alone"], kinds, {}, workers=4, examples=50) == {"alone": 1}


def test_nothing_is_split_for_one_worker_and_no_target_into_more_parts_than_examples():
    assert set(schedule.split_parts(list(HISTORY), KINDS, HISTORY, workers=1, examples=50).values()) == {1}
    assert schedule.split_parts(["slow"], KINDS, HISTORY, workers=8, examples=3) == {"slow": 3}


def test_splitting_the_slow_target_ends_the_run_sooner():
    history = {t: s for t, s in HISTORY.items() if t != "buggy"}  # 80 s: 20 s a worker, the slow one in 3 parts
    whole = schedule.longest_first(list(history), KINDS, history)
    split = schedule.units(list(history), KINDS, history, workers=4, examples=50)
    assert [k for k in split if k.startswith("slow")] == ["slow#1/3", "slow#2/3", "slow#3/3"]
    assert ends(split, unit_cost(split, history), 4) < ends(whole, unit_cost(whole, history), 4)


def test_the_parts_run_longest_first_beside_the_other_targets():
    split = schedule.units(list(HISTORY), KINDS, HISTORY, workers=1, examples=50)
    assert split == ["slow", "buggy", "a", "b", "c", "d"]  # one worker: nothing split, longest first
    split = schedule.units(list(HISTORY), KINDS, HISTORY, workers=4, examples=50, others=1)
    assert split == ["buggy", "slow#1/2", "slow#2/2", "a", "b", "c", "d"]


@pytest.mark.parametrize(("examples", "parts"), [(50, 2), (10, 3), (3, 3), (7, 4)])
def test_the_parts_share_the_examples_evenly_and_add_up_to_them(examples, parts):
    shares = [schedule.part_examples(examples, j, parts) for j in range(1, parts + 1)]
    assert sum(shares) == examples and max(shares) - min(shares) <= 1 and min(shares) >= 1


@pytest.mark.parametrize("target", ["flex", "flex:fresh_metadata", "mymod:Cls"])
def test_an_items_key_names_its_target_and_part(target):
    assert schedule.target_of(schedule.part_name(target, 2, 3)) == (target, 2, 3)
    assert schedule.part_name(target, 1, 1) == target and schedule.target_of(target) == (target, 1, 1)


def test_parts_of_a_derandomised_check_draw_with_seeds_of_their_own():
    register_profiles()
    check = CheckOptions(examples=25)
    parts = [schedule.part_check(check, "graphsafe-ci", j, 2) for j in (1, 2)]
    assert [(p.examples, p.seed) for p in parts] == [(13, 0), (12, 1)]


def test_parts_of_a_seeded_check_take_consecutive_seeds():
    check = CheckOptions(examples=10, seed=7)
    assert [schedule.part_check(check, None, j, 2).seed for j in (1, 2)] == [7, 8]


def test_parts_of_a_random_check_keep_no_seed_so_that_they_keep_the_example_database():
    register_profiles()
    assert settings.get_profile("graphsafe-fast").derandomize is False
    assert schedule.part_check(CheckOptions(examples=10), "graphsafe-fast", 2, 2).seed is None


def test_the_durations_of_a_split_targets_parts_add_up_under_the_target():
    class Cache:
        data: dict = {}

        def get(self, key, default):
            return self.data.get(key, default)

        def set(self, key, value):
            self.data[key] = value

    cache = Cache()
    recorder = schedule.DurationRecorder(SimpleNamespace(cache=cache))
    for key, seconds in (("slow#1/2", 20.0), ("slow#2/2", 22.0)):
        props = [(schedule.ENGINE_PROPERTY, "cuda")]
        recorder.pytest_runtest_logreport(
            SimpleNamespace(nodeid=f"graphsafe[{key}]", duration=seconds, user_properties=props)
        )
    recorder.pytest_sessionfinish()
    assert cache.data[schedule.CACHE_KEY] == {"cuda": {"slow": 42.0}}

"""Sharding the targets over the machines of a CI matrix (graphsafe/frontend/schedule.py ``shard``,
``--graphsafe-shard`` / ``--shard K/N`` parsed in graphsafe/frontend/options.py)."""

from __future__ import annotations

import random

import pytest

from graphsafe import UsageError
from graphsafe.frontend import options, schedule
from graphsafe.frontend.cli import main

TARGETS = [f"t{i:02d}" for i in range(13)]
KINDS = {t: ("finds" if i % 3 == 0 else "passes") for i, t in enumerate(TARGETS)} | {"t12": "error"}
TIMED = {t: float((7 * i) % 11 + 1) for i, t in enumerate(TARGETS)}


def shards(targets, kinds, history, n):
    return [schedule.shard(targets, kinds, history, k, n) for k in range(1, n + 1)]


@pytest.mark.parametrize("history", [{}, TIMED], ids=["no-durations", "durations"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 13, 20])
def test_n_shards_together_select_every_target_exactly_once(n, history):
    together = [t for part in shards(TARGETS, KINDS, history, n) for t in part]
    assert sorted(together) == sorted(TARGETS)


def test_a_shard_keeps_the_given_order_and_does_not_depend_on_it():
    mixed = random.Random(0).sample(TARGETS, len(TARGETS))
    for k in (1, 2, 3):
        got = schedule.shard(mixed, KINDS, TIMED, k, 3)
        assert got == [t for t in mixed if t in got]
        assert sorted(got) == sorted(schedule.shard(TARGETS, KINDS, TIMED, k, 3))


def test_shards_are_balanced_by_recorded_durations():
    # longest first, each to the least loaded shard: a 10 s target alone, the rest together
    history = {"long": 10.0, "a": 3.0, "b": 3.0, "c": 2.0, "d": 1.0}
    kinds = dict.fromkeys(history, "passes")
    assert shards(list(history), kinds, history, 2) == [["long"], ["a", "b", "c", "d"]]


def test_without_durations_each_kind_is_dealt_round_robin_by_name():
    kinds = {"f1": "finds", "f2": "finds", "p1": "passes", "p2": "passes", "p3": "passes", "p4": "passes"}
    first, second = shards(list(kinds), kinds, {}, 2)
    assert (first, second) == (["f1", "p1", "p3"], ["f2", "p2", "p4"])


def test_more_shards_than_targets_leaves_the_last_shards_empty():
    kinds = {"a": "passes", "b": "passes"}
    assert shards(["a", "b"], kinds, {}, 4) == [["a"], ["b"], [], []]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("3/2", "no shard 3 of 2"),
        ("0/2", "no shard 0 of 2"),
        ("1/0", "no shard 1 of 0"),
        ("a/b", "expected K/N"),
        ("2", "expected K/N"),
        ("-1/2", "expected K/N"),
    ],
)
def test_a_bad_shard_is_a_usage_error_that_says_what_is_expected(text, said):
    with pytest.raises(UsageError, match=said) as e:
        options.parse_shard(text, "--graphsafe-shard")
    assert str(e.value).startswith("--graphsafe-shard: ")


def test_a_shard_is_parsed_as_k_of_n():
    assert options.parse_shard(" 2/4 ") == (2, 4)
    assert options.parse_shard("") is None
    assert options.parse_shard(None) is None


def test_the_command_line_refuses_a_bad_shard_before_checking(capsys):
    assert main(["check", "flex", "--engine", "emulate", "--shard", "3/2"]) == 2
    assert "graphsafe: error: --shard: no shard 3 of 2" in capsys.readouterr().err

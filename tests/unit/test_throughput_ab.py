"""benchmarks/throughput_ab.py: each round's ratio is its check over its own bare loop, and trees are compared by
the median of paired differences (round i of each tree), which a drift of the host between pairs does not move."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_path = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput_ab.py"
_spec = importlib.util.spec_from_file_location("throughput_ab", _path)  # benchmarks/ is not a package
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)


def _round(bare_per_s: float, worst_per_s: float, default_per_s: float) -> dict:
    return {
        "bare": [1000, 1000 / bare_per_s, 0],
        "worst": [800, 800 / worst_per_s, True],
        "default": [800, 800 / default_per_s, True],
    }


def test_a_rounds_ratio_is_its_check_over_its_own_bare_loop():
    assert ab.ratios([_round(1000, 650, 500), _round(500, 400, 300)], "worst") == [0.65, 0.8]


def test_a_host_that_slows_both_trees_alike_leaves_the_paired_difference_alone():
    fast, slow = 2.0, 1.0  # the host's speed in each pair; this tree 0.05 above the baseline in both
    sides = {
        "this": [_round(1000 * f, 700 * f, 600 * f) for f in (fast, slow, fast)],
        "baseline": [_round(1000 * f, 650 * f, 550 * f) for f in (fast, slow, fast)],
    }
    r = ab.row("v", sides)
    assert r["worst"]["paired_difference_median"] == 0.05
    assert r["default"]["paired_difference_median"] == 0.05
    assert r["worst"]["this_median"] == 0.7 and r["worst"]["baseline_median"] == 0.65


def test_a_check_that_fails_in_any_round_marks_the_row_not_ok():
    bad = _round(1000, 650, 500)
    bad["worst"][2] = False
    assert ab.row("v", {"this": [_round(1000, 650, 500)], "baseline": [bad]})["ok"] is False


def test_merge_adds_this_run_after_the_files_earlier_runs():
    earlier = {"engine": "cuda", "examples": 200, "steps": 4, "runs": [{"label": "old"}]}
    data = {"engine": "cuda", "examples": 200, "steps": 4, "runs": [{"label": "new"}]}
    assert [r["label"] for r in ab.merged(earlier, data)["runs"]] == ["old", "new"]


def test_merge_refuses_a_run_of_other_settings_naming_the_setting():
    earlier = {"engine": "cuda", "examples": 50, "steps": 4, "runs": [{"label": "old"}]}
    data = {"engine": "cuda", "examples": 200, "steps": 4, "runs": [{"label": "new"}]}
    with pytest.raises(ValueError, match="examples=50"):
        ab.merged(earlier, data)


def test_without_an_earlier_file_the_run_is_the_whole_result():
    data = {"engine": "cuda", "examples": 200, "steps": 4, "runs": [{"label": "new"}]}
    assert ab.merged({}, data) == data

"""benchmarks/vllm_merge.py: a later campaign's rows replace an earlier one's, row by row, and say where they ran."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[3] / "benchmarks" / "vllm_merge.py"
_spec = importlib.util.spec_from_file_location("vllm_merge", _path)  # benchmarks/ is not a package
vllm_merge = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vllm_merge)

H200 = {"gpu": "H200", "when": "day 1"}
H100 = {"gpu": "H100", "when": "day 2"}


def row(target: str, found: list[list[str]], expected: tuple[str, ...] = (), vllm: str = "0.33.0") -> dict:
    return {"target": target, "vllm": vllm, "expected": list(expected), "found": found}


def test_a_row_that_ran_replaces_the_same_target_and_release_and_keeps_its_machine():
    base = {"machine": H200, "rows": [row("vllm:FLEX", [["error:ContextBroken"]]), row("vllm:MLA", [[]])]}
    new = {"machine": H100, "rows": [row("vllm:FLEX", [[]])]}
    merged = vllm_merge.merge(base, [new])
    assert [(r["target"], r["found"], r["gpu"]) for r in merged["rows"]] == [
        ("vllm:FLEX", [[]], "H100"),
        ("vllm:MLA", [[]], "H200"),
    ]
    assert merged["machine"] == H100 and merged["machines"] == ["H100", "H200"]


def test_a_row_that_did_not_run_keeps_the_older_one():
    base = {"machine": H200, "rows": [row("vllm:MLA:bug", [["stale-pointer"]], ("stale-pointer",))]}
    new = {"machine": H100, "rows": [row("vllm:MLA:bug", [["not run"]], ("stale-pointer",))]}
    [kept] = vllm_merge.merge(base, [new])["rows"]
    assert kept["found"] == [["stale-pointer"]] and kept["gpu"] == "H200"


def test_another_release_is_another_row():
    base = {"machine": H200, "rows": [row("vllm:MLA", [[]], vllm="0.33.0")]}
    merged = vllm_merge.merge(base, [{"machine": H100, "rows": [row("vllm:MLA", [[]], vllm="0.26.0")]}])
    assert [r["vllm"] for r in merged["rows"]] == ["0.33.0", "0.26.0"] and merged["vllm"] == ["0.26.0", "0.33.0"]


def test_the_summary_sorts_rows_by_whether_each_seed_found_what_was_expected():
    rows = [
        row("vllm:A", [[], []]),
        row("vllm:B", [[], ["frozen-host-value"]]),
        row("vllm:A:bug", [["lazy-init"], ["lazy-init"]], ("lazy-init",)),
        row("vllm:A:other", [["lazy-init", "stale-padding"]], ("lazy-init",)),
    ]
    assert vllm_merge.summary(rows) == {
        "stock_clean_every_seed": ["vllm:A 0.33.0"],
        "stock_clean_where_run": [],
        "stock_with_findings": ["vllm:B 0.33.0"],
        "buggy_exact_every_seed": ["vllm:A:bug 0.33.0"],
        "buggy_exact_where_run": [],
        "buggy_not_exact": ["vllm:A:other 0.33.0"],
        "seeds_not_run": [],
    }


def test_a_seed_that_did_not_run_counts_neither_way():
    rows = [
        row("vllm:A:bug", [["lazy-init"], ["not run"]], ("lazy-init",)),
        row("vllm:A:other", [["stale-padding"], ["not run"]], ("lazy-init",)),
        row("vllm:A:none", [["not run"]], ("lazy-init",)),
    ]
    out = vllm_merge.summary(rows)
    assert out["buggy_exact_where_run"] == ["vllm:A:bug 0.33.0"] and out["buggy_exact_every_seed"] == []
    assert out["buggy_not_exact"] == ["vllm:A:other 0.33.0", "vllm:A:none 0.33.0"]
    assert out["seeds_not_run"] == [
        "vllm:A:bug 0.33.0: 1 of 2",
        "vllm:A:other 0.33.0: 1 of 2",
        "vllm:A:none 0.33.0: 1 of 1",
    ]


def test_sglang_rows_merge_by_their_sglang_release():
    base = {
        "machine": H200,
        "rows": [{"target": "sglang:triton", "sglang": "0.5.23", "expected": [], "found": [["x"]]}],
    }
    new = {"machine": H100, "rows": [{"target": "sglang:triton", "sglang": "0.5.23", "expected": [], "found": [[]]}]}
    merged = vllm_merge.merge(base, [new])
    assert [r["found"] for r in merged["rows"]] == [[[]]] and merged["sglang"] == ["0.5.23"] and "vllm" not in merged
    assert merged["summary"]["stock_clean_every_seed"] == ["sglang:triton 0.5.23"]

"""benchmarks/results_tables.py: every result file reads as tables (what the docs' Benchmarks page shows)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_path = Path(__file__).resolve().parents[2] / "benchmarks" / "results_tables.py"
_spec = importlib.util.spec_from_file_location("results_tables", _path)  # benchmarks/ is not a package
results_tables = importlib.util.module_from_spec(_spec)
sys.modules["results_tables"] = results_tables  # dataclasses look their module up by name
_spec.loader.exec_module(results_tables)

FILES = results_tables.result_files()


def test_there_are_result_files():
    assert FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_result_file_renders_rows_as_wide_as_their_header(path):
    tables = results_tables.tables_of(path)
    assert tables
    for table in tables:
        assert table.rows
        assert all(len(row) == len(table.header) for row in table.rows), table.caption


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_result_file_names_its_machine_and_date(path):
    prov = results_tables.provenance(results_tables.load(path))
    assert prov["machine"] and prov.get("date")


def test_a_file_no_renderer_knows_is_an_error_naming_it(tmp_path):
    path = tmp_path / "nosuch-benchmark-cpu.json"
    path.write_text('{"machine": {}}')
    with pytest.raises(ValueError, match="nosuch-benchmark-cpu.json"):
        results_tables.tables_of(path)

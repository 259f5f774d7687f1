"""The quick start's example (examples/quickstart/scale.py) gets the verdicts the tutorial and README show."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import graphsafe

_path = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "scale.py"
_spec = importlib.util.spec_from_file_location("scale", _path)
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)


def _check(cls: type) -> graphsafe.CheckResult:
    return graphsafe.check(cls, engine="emulate", device="cpu", examples=20, seed=0, database=False, isolate="none")


def test_the_safe_scale_has_no_finding():
    result = _check(scale.Scale)
    assert result.ok, result.findings


@pytest.mark.parametrize("name, kind", [("ScaleFreshLens", "stale-pointer"), ("ScaleKeptLens", "unpersisted-metadata")])
def test_a_rebound_lens_buffer_is_named_with_its_kind(name, kind):
    result = _check(getattr(scale, name))
    assert result.kinds == {kind}
    assert [f.where for f in result.findings] == ["self.lens"]


def test_each_class_declares_the_verdict_it_gets():
    assert getattr(scale.Scale, "expected", None) is None
    assert scale.ScaleFreshLens.expected == "stale-pointer"
    assert scale.ScaleKeptLens.expected == "unpersisted-metadata"

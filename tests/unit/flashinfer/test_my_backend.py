"""The documentation's own-backend example (examples/flashinfer/my_backend.py) on the CPU stand-in: the engine that
keeps FlashInfer from splitting is clean, the one with a constant split size is a frozen plan value."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import graphsafe
from tests.targets.flashinfer_standin import small

_path = Path(__file__).resolve().parents[3] / "examples" / "flashinfer" / "my_backend.py"
_spec = importlib.util.spec_from_file_location("my_backend", _path)
my_backend = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(my_backend)


def _small(cls: type, **extra) -> type:  # the engine's 32/8 heads cut to the stand-in's usual 8/2
    return small(cls, __name__, num_qo_heads=8, num_kv_heads=2, **extra)


def _check(cls: type, **kw):
    return graphsafe.check(cls, engine="emulate", device="cpu", seed=0, database=False, isolate="none", **kw)


def test_the_engine_without_a_kv_split_is_clean():
    r = _check(_small(my_backend.MyDecode), examples=30)
    assert r.ok, r.findings


def test_a_constant_split_size_is_a_frozen_plan_value(no_shrinking):
    r = _check(_small(my_backend.MyDecodeFixedSplit, split_pages=2), examples=30, capture="minimal")
    assert r.kinds == {"frozen-host-value"}, r.findings
    assert any("split_kv" in f.message for f in r.findings), [f.message for f in r.findings]


@pytest.mark.parametrize("cls", ["MyDecode", "MyDecodeFixedSplit"])
def test_the_example_classes_plan_on_tensor_core_decode(cls):
    target = _small(getattr(my_backend, cls))()
    target.setup(target.default_spec, "cpu")
    assert target.make_wrapper(2)._use_tensor_cores

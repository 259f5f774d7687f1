"""The README's own-backend example (examples/flashinfer/my_backend.py) on the CPU stand-in: the engine that
keeps FlashInfer from splitting is clean, the one with a constant split size is a frozen plan value."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import graphsafe

_path = Path(__file__).resolve().parents[3] / "examples" / "flashinfer" / "my_backend.py"
_spec = importlib.util.spec_from_file_location("my_backend", _path)
my_backend = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(my_backend)

SMALL = {"library": "standin", "num_qo_heads": 4, "num_kv_heads": 2, "head_dim": 16, "workspace_mib": 1,
         "default_spec": graphsafe.CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=64, block_size=16)}


def _small(cls: type, **extra) -> type:
    return type(cls.__name__, (cls,), {**SMALL, **extra, "__module__": __name__})


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

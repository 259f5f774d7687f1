"""graphsafe's FlashInfer targets: on the CPU through the stand-in (each mistake gets exactly its kind, each
target that follows FlashInfer's documented usage none), and on a GPU with FlashInfer itself (skipped, with
the reason, where FlashInfer or a GPU is missing).  The H100 campaign is benchmarks/flashinfer_campaign.py."""

from __future__ import annotations

import pytest

import graphsafe
from graphsafe import flashinfer as fi
from tests.targets.flashinfer_standin import EXPECTED, STANDIN

#: the capture policy under which each mistake shows (the campaign explores them all)
CAPTURE = {"flashinfer:decode:growing_workspace": "ascending", "flashinfer:decode:fixed_split": "minimal"}
MISSING = fi.requirement()
needs_flashinfer = pytest.mark.skipif(MISSING is not None, reason=f"FlashInfer on a GPU: {MISSING}")


def check(cls, capture="worst", examples=6, engine="emulate"):
    # the stand-in's kernels read their schedule on the host: on the CPU, also on a machine with a GPU
    device = "cpu" if engine == "emulate" else None
    return graphsafe.check(
        cls, engine=engine, examples=examples, seed=0, database=False, capture=capture, device=device
    )


@pytest.mark.parametrize("name", fi.SAFE)
def test_a_target_that_follows_flashinfers_documented_usage_gets_no_finding_on_the_stand_in(name):
    result = check(STANDIN[name], capture="explore", examples=8)
    assert result.ok, result.summary()


@pytest.mark.parametrize("name", fi.BUGGY)
def test_each_flashinfer_mistake_gets_exactly_its_kind_on_the_stand_in(name, no_shrinking):
    result = check(STANDIN[name], capture=CAPTURE.get(name, "worst"))
    assert result.kinds == set(EXPECTED[name]), result.summary()


def test_every_mistake_has_a_safe_twin():
    assert set(fi.TWIN_OF) == set(fi.BUGGY) and set(fi.TWIN_OF.values()) <= set(fi.SAFE)


def test_a_rebound_fixed_buffer_is_a_stale_pointer_naming_the_wrappers_buffer():
    [f] = check(STANDIN["flashinfer:decode:default_mode"]).errors
    assert f.kind.value == "stale-pointer" and f.where.startswith("self.wrappers[") and "_buf" in f.where
    assert "flashinfer.decode.run" in f.message


@pytest.mark.cuda
@needs_flashinfer
def test_flashinfer_decode_in_cuda_graph_mode_gets_no_finding_on_a_gpu():
    result = check("flashinfer:decode", engine="cuda", capture="explore", examples=8)
    assert result.ok, result.summary()


@pytest.mark.cuda
@needs_flashinfer
def test_flashinfers_default_mode_captured_is_a_stale_pointer_naming_the_rebound_buffer_on_a_gpu():
    [f] = check("flashinfer:decode:default_mode", engine="cuda").errors
    assert f.kind.value == "stale-pointer" and "_paged_kv_" in f.where, f.message

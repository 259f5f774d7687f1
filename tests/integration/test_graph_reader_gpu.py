"""The graph reader on a GPU: kernels nobody wrapped (an nvcc extension, cuBLAS called from C++, FlashInfer
without ``watch``) are named by the graph that replays.  A rebound buffer is a stale-pointer before any replay
reads it; a host scalar frozen into a kernel's parameters is a frozen-host-value named by kernel and parameter;
an accumulator nothing resets is named; a graph that copies from a host temporary is a stale-pointer; two layer
groups whose plans share one int workspace are named by that workspace and both plans.

CUDA only (skipped on a machine without a GPU, or without cuda-bindings).  The extension is built once per
machine (about a minute, ``TORCH_EXTENSIONS_DIR``); FlashInfer cases skip where FlashInfer is missing.
"""

from __future__ import annotations

import pytest
import torch

import graphsafe
from graphsafe.engines import graph_reader
from graphsafe.engines.base import Graph
from graphsafe.flashinfer import requirement

READER_OFF = graph_reader.unavailable()
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA not available)"),
    pytest.mark.skipif(READER_OFF is not None, reason=f"graph reader off: {READER_OFF}"),
]
FLASHINFER = requirement()
needs_flashinfer = pytest.mark.skipif(FLASHINFER is not None, reason=f"FlashInfer on a GPU: {FLASHINFER}")


def check(cls, capture="worst", examples=8, **kw):
    return graphsafe.check(cls, engine="cuda", examples=examples, seed=0, database=False, capture=capture, **kw)


@pytest.fixture(scope="module")
def T():
    from tests.targets import graph_ext

    graph_ext.ext()  # built (or loaded) once for the module
    return graph_ext


def test_an_extension_kernel_reading_a_rebound_buffer_is_a_stale_pointer_naming_kernel_parameter_and_path(T):
    [f] = check(T.ExtGatherRebound).errors
    assert f.kind.value == "stale-pointer" and f.where == "self.idx"
    assert "gs_gather_rows (node 0) parameter 1" in f.message and "self.idx now at" in f.message


def test_an_extension_kernel_taking_a_frozen_scalar_is_a_frozen_value_named_by_its_parameter(T, no_shrinking):
    [f] = check(T.ExtScaleFrozen).errors
    assert f.kind.value == "frozen-host-value"
    assert f.where == "gs_scale_rows.parameter 4 (float)", f.message
    assert f.details["seen_in"] == "graph"


def test_a_cublas_matmul_whose_operand_is_rebound_is_named(T):
    [f] = check(T.CublasRebound).errors
    assert f.kind.value == "stale-pointer" and f.where == "self.a"
    assert "nvjet" in f.message or "gemm" in f.message.lower(), f.message  # cuBLAS's kernel, read from the graph


def test_a_replay_that_would_spin_on_a_rebound_flag_never_runs(T, monkeypatch):
    stale_replays = []
    replay = Graph.replay

    def watched(self):
        stale_replays.extend(b for b in self.dead_inputs())
        replay(self)

    monkeypatch.setattr(Graph, "replay", watched)
    [f] = check(T.ExtSpinRebound).errors
    assert f.kind.value == "stale-pointer" and f.where == "self.flag"
    assert "gs_spin_until" in f.message
    assert stale_replays == []  # no replay ran over the freed flag


@pytest.mark.parametrize("name", ["ExtGatherSafe", "ExtScaleSafe", "CublasSafe"])
def test_extension_and_cublas_targets_that_keep_their_buffers_are_clean(T, name):
    result = check(getattr(T, name), capture="explore", examples=12)
    assert result.ok, result.summary()


def test_an_accumulator_nothing_resets_is_named(T, no_shrinking):
    [f] = check(T.ExtAccumulator).errors
    assert f.kind.value == "unpersisted-metadata" and f.where == "self.acc", f.message


def test_a_graph_that_copies_from_a_host_temporary_is_a_stale_pointer(T):
    [f] = check(T.HostTemporary).errors
    assert f.kind.value == "stale-pointer" and f.where == "memcpy (node 0) source", f.message
    assert "pinned host memory" in f.message and f.details["host"][0]["memory"] == "host-pinned"


def test_a_frozen_split_count_that_sizes_its_partials_and_only_reorders_is_info():
    from tests.targets.graph_numerics import SplitCountSizesPartials

    result = check(SplitCountSizesPartials, capture="worst", tolerance=graphsafe.Tolerance(rtol=0.0, atol=0.0))
    assert result.ok, result.summary()
    infos = [f for f in result.findings if f.kind.value == "frozen-host-value"]
    assert infos and "numerics only: this batch's own graph differs" in infos[0].message


@needs_flashinfer
def test_flashinfer_default_mode_with_watch_off_is_a_stale_pointer_from_the_graph(monkeypatch):
    monkeypatch.setenv("GRAPHSAFE_OPAQUE", "0")
    [f] = check("flashinfer:decode:default_mode").errors
    assert f.kind.value == "stale-pointer" and "_paged_kv_" in f.where
    assert "BatchDecodeWithPagedKVCacheKernel" in f.message and "flashinfer.decode.run" not in f.message


@needs_flashinfer
def test_two_layer_groups_with_an_int_workspace_each_are_clean():
    from tests.targets.flashinfer_groups import TwoGroups

    result = check(TwoGroups, capture="explore", examples=12)
    assert result.ok, result.summary()


@needs_flashinfer
def test_two_layer_groups_sharing_an_int_workspace_name_it_and_both_plans_with_watch_off(monkeypatch, no_shrinking):
    from tests.targets.flashinfer_groups import TwoGroupsSharedIntWorkspace

    monkeypatch.setenv("GRAPHSAFE_OPAQUE", "0")
    result = check(TwoGroupsSharedIntWorkspace, capture="explore", examples=12)
    assert result.kinds == {"unpersisted-metadata"}, result.summary()
    f = result.errors[0]
    assert "_int_workspace_buffer" in f.where, f.message
    assert "self.plan(full" in f.message and "self.plan(window" in f.message, f.message

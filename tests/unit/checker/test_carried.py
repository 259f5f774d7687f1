"""unpersisted-metadata's carried-buffer shape on a FlashInfer decode graph recorded on a GPU (the fixture): its
float workspace, which only the graph reader sees, read before written, reset by nothing and left changed by the
replay, is named; one the replay hands back as it found it is not; on a step that shows frozen values it is left
to frozen-host-value (a graph frozen for another batch reads workspace it did not write this time)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from graphsafe.capture.graph_map import map_graph
from graphsafe.diagnosis.probes import unpersisted_metadata
from tests.fixtures.graphs import load

FROZEN = ([{"kind": "argument", "kernel": "BatchDecodeWithPagedKVCacheKernel", "argument": "parameter 0"}], "graph")


@pytest.fixture
def decode_graph(monkeypatch):
    rec = load("flashinfer_decode")
    gmap = map_graph(rec.read, rec.sizes, rec.paths, rec.space)
    ws = rec.address("workspace")
    evidence = SimpleNamespace(
        graph_read_tensors={k: None for k in gmap.held()},
        ledger=SimpleNamespace(written=lambda k: k != ws),  # prepare writes everything but the float workspace
        _replay_writes=lambda keys: {ws} & keys,  # the graph writes it
    )
    ctx = SimpleNamespace(
        evidence=evidence,
        info=SimpleNamespace(launches=[], graph_map=gmap, paths=rec.paths),
        graph=SimpleNamespace(outputs=[]),
    )
    # read before written, and left changed by a replay from zeros
    monkeypatch.setattr(unpersisted_metadata, "carried_inputs", lambda ctx, keys, accumulating=False: list(keys))
    return ctx, ws


def test_a_workspace_only_the_graph_reader_sees_read_before_written_is_named(decode_graph, monkeypatch):
    ctx, ws = decode_graph
    monkeypatch.setattr(unpersisted_metadata, "frozen_values", lambda ctx: ([], ""))
    f = unpersisted_metadata._carried(ctx)
    assert f is not None and f.details["origin"] == "carried" and f.where == "self.workspace", f


def test_on_a_step_with_frozen_values_a_carried_workspace_is_left_to_frozen_host_value(decode_graph, monkeypatch):
    ctx, _ = decode_graph
    monkeypatch.setattr(unpersisted_metadata, "frozen_values", lambda ctx: FROZEN)
    assert unpersisted_metadata._carried(ctx) is None


def test_a_workspace_the_replay_hands_back_as_it_found_it_is_not_named(decode_graph, monkeypatch):
    ctx, ws = decode_graph
    monkeypatch.setattr(unpersisted_metadata, "frozen_values", lambda ctx: ([], ""))
    # read before written, but handed back as a replay from zeros found it
    monkeypatch.setattr(
        unpersisted_metadata, "carried_inputs", lambda ctx, keys, accumulating=False: [] if accumulating else list(keys)
    )
    assert unpersisted_metadata._carried(ctx) is None

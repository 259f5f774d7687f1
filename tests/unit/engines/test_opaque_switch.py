"""GRAPHSAFE_OPAQUE=0 switches every opaque_call and flashinfer.watch off: the call runs, nothing is recorded."""

from __future__ import annotations

import torch

import graphsafe
from graphsafe.engines.recording import Recorder, opaque_enabled
from graphsafe.flashinfer import watch


def scale(x, out, factor):
    torch.mul(x, factor, out=out)


def test_an_opaque_call_is_recorded_by_default(monkeypatch):
    monkeypatch.delenv("GRAPHSAFE_OPAQUE", raising=False)
    x, out = torch.ones(2), torch.zeros(2)
    with Recorder("observe") as rec:
        graphsafe.opaque_call("ext.scale", scale, x, out, 2.0)
    assert opaque_enabled() and [launch.kind for launch in rec.launches] == ["opaque"]


def test_switched_off_an_opaque_call_is_a_plain_call_the_dispatcher_sees_into(monkeypatch):
    monkeypatch.setenv("GRAPHSAFE_OPAQUE", "0")
    x, out = torch.ones(2), torch.zeros(2)
    with Recorder("observe") as rec:
        graphsafe.opaque_call("ext.scale", scale, x, out, 2.0)
    assert not opaque_enabled()
    assert [launch.kind for launch in rec.launches] == ["aten"]  # the torch op inside, not the call
    assert out.tolist() == [2.0, 2.0]


def test_switched_off_watch_wraps_nothing(monkeypatch):
    class Wrapper:
        _cached_module = object()

    monkeypatch.setenv("GRAPHSAFE_OPAQUE", "0")
    w = Wrapper()
    module = w._cached_module
    with watch(w) as found:
        assert found == 0 and w._cached_module is module


def test_the_emulator_says_once_that_nothing_sees_kernels_outside_aten_and_triton(monkeypatch):
    from graphsafe.engines import EmulatorEngine

    x = torch.ones(2)
    monkeypatch.setenv("GRAPHSAFE_OPAQUE", "0")
    graph = EmulatorEngine("cpu").capture(lambda: x * 2, pool=None)
    assert any("GRAPHSAFE_OPAQUE=0" in n for n in graph.recording.notes)
    monkeypatch.setenv("GRAPHSAFE_OPAQUE", "1")
    assert not EmulatorEngine("cpu").capture(lambda: x * 2, pool=None).recording.notes

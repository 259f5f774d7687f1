"""A replay that faults (an illegal memory access) ends the check at that example: nothing more runs on the
broken device (no Hypothesis replay or shrink of the example, which would fail differently there), the
error names the example and the step, and findings made before the fault are kept."""

from __future__ import annotations

import pytest

import graphsafe
from graphsafe.engines.emulate import EmulatorEngine
from tests.targets import faults
from tests.targets.faults import FaultsOnLongReplay, StalePointerThenFault


@pytest.fixture
def faulting_device(monkeypatch):
    faults.reset()
    monkeypatch.setattr(EmulatorEngine, "healthy", faults.healthy)
    yield faults.DEVICE
    faults.reset()


def _check(target, **kw):
    return graphsafe.check(target, engine="emulate", seed=0, database=False, isolate="none", **kw)


def test_a_fault_in_a_replay_step_is_context_broken_naming_the_example_and_step(faulting_device):
    with pytest.raises(graphsafe.ContextBroken) as info:
        _check(FaultsOnLongReplay, examples=50, capture="worst")
    err = info.value
    assert err.steps and 0 <= err.step < len(err.steps)
    assert max(err.steps[err.step]["seq_lens"]) > faults.FAULT_PAST
    assert f"replay of step {err.step}" in err.message and "illegal memory access" in err.message


def test_nothing_runs_on_the_device_after_a_fault(faulting_device):
    with pytest.raises(graphsafe.ContextBroken):
        _check(FaultsOnLongReplay, examples=50, capture="worst")
    assert faulting_device["faulted"] and faulting_device["calls_after"] == 0


def test_a_finding_made_before_a_fault_is_kept_with_a_note(faulting_device):
    r = _check(StalePointerThenFault, examples=50, capture="worst")
    assert faulting_device["faulted"], "the stand-in never faulted: the test proves nothing"
    assert r.kinds & {"stale-pointer", "unpersisted-metadata"}
    assert any("a device fault ended" in n for n in r.notes), r.notes
    assert faulting_device["calls_after"] == 0

"""Backends written outside the checker, from the public hazard map: each buggy one gets exactly its
expected finding kinds, each safe twin none (``tests/targets/hazards``, plain torch and Triton, decode
and varlen, persistent state; the GPU run of the same targets is ``benchmarks/detection.py``)."""

from __future__ import annotations

import pytest

import graphsafe
from graphsafe.diagnosis.causes import cause_key
from tests.targets import hazards as H

# the default capture policies explore every phase: the capture-dependent bugs need theirs
EXAMPLES = 10


def check(cls, engine, examples=EXAMPLES):
    return graphsafe.check(cls, engine=engine, examples=examples, database=False, seed=0, timeout=1800)


@pytest.mark.parametrize("cls", list(H.EXPECTED), ids=H.label)
def test_a_hazard_gets_exactly_its_expected_kinds_and_names_its_buffer(cls, engine):
    result = check(cls, engine)
    assert result.kinds == set(H.EXPECTED[cls]), result.summary()
    if cls in H.CAUSES:  # the buffer the graph read and, for a wrong buffer, where this step's values went
        cause, went = H.CAUSES[cls]  # ("a|b": either buffer of one mistake, as the shrunk example shows it)
        [f] = result.errors
        assert cause_key(f.cause) in cause.split("|"), result.summary()
        if went is not None:
            assert set(went.split("|")) & {cause_key(p) for p in f.details["new"]}, result.summary()
            assert f.where.split(", ")[0] not in f.details["new"], result.summary()


@pytest.mark.parametrize("cls", H.SAFE, ids=H.label)
def test_a_safe_twin_gets_no_finding(cls, engine):
    result = check(cls, engine, examples=8)
    assert result.ok, result.summary()
    assert not [f for f in result.findings if f.severity == "error"]


def test_every_buggy_target_has_a_safe_twin():
    assert set(H.TWIN_OF) == set(H.EXPECTED)
    assert set(H.TWIN_OF.values()) <= set(H.SAFE)
    assert len(H.EXPECTED) >= 12


def test_one_cause_is_one_finding():
    # a cache keyed on the batch's shape hands prepare() a new tensor and later evicts the old one:
    # the graph reads a rebound buffer first (unpersisted) and a freed one later (stale) - one cause
    result = check(H.paged_decode.CachedBlockTable, "emulate", examples=20)
    assert [f.kind.value for f in result.errors] == ["stale-pointer"], result.summary()


def test_the_capture_order_hazard_names_the_order_that_breaks():
    result = check(H.workspace.GrowingWorkspace, "emulate")
    [f] = result.errors
    assert f.details["capture_policy"] == "ascending" and f.details["capture_order"] == "ascending"


def test_a_frozen_value_found_under_a_minimal_capture_says_which_capture_breaks():
    result = check(H.varlen.DecodeKernelChoice, "emulate")
    assert result.kinds == {"frozen-host-value"}
    assert {f.details["capture_policy"] for f in result.errors} <= {"minimal", "drawn"}


def test_a_frozen_split_count_that_only_changes_rounding_is_not_an_error():
    result = check(H.split_kv.SplitCountFromBatchDeviceLen, "emulate", examples=12)
    assert result.ok, result.summary()

"""A step whose replay never ends (or faults) gets its cause without replaying it: the example runs again up to that
step, and only the probes that decide without a replay run there (``cause_without_replay``, what a sandbox's fresh
process runs).  Their safe twins, the same examples, get no finding."""

from __future__ import annotations

import pytest

from graphsafe.checker import CheckOptions
from graphsafe.checker.unreplayable import cause_without_replay
from graphsafe.contract import Batch
from tests.targets.hangs import HangsInReplay
from tests.targets.hazards.lazy_guard import LazyTokenMetadata, TokenMetadataOnDevice
from tests.targets.hazards.split_kv import LazyPlannedSplitKV, PlannedSplitKV
from tests.targets.hazards.wrong_buffer import PingPongMetadata, PingPongStaging

WORST = {"policy": "worst", "batch": None}


def fault(steps: list[Batch], step: int, size: int, capture: dict = WORST) -> dict:
    return {"steps": [b.to_dict() for b in steps], "step": step, "size": size, "capture": capture}


def test_a_frozen_value_whose_replay_never_ends_is_named_and_the_earlier_steps_replay(engine):
    # step 0's lengths sum to the capture batch's (16): its replay ends; step 1's would spin for ever
    steps = [Batch((1, 1), (8, 8), ((1, 2), (3, 4)), seed=3), Batch((1, 1), (3, 5), ((1,), (2, 3)), seed=4)]
    r = cause_without_replay(HangsInReplay, CheckOptions(engine=engine), fault(steps, 1, 2))
    (f,) = r.findings
    assert f.kind.value == "frozen-host-value" and f.where == "_spin_until.total"
    assert f.step == 1 and r.steps == 2


def test_a_drawn_capture_is_captured_again_with_its_batch(engine):
    capture = Batch((1,), (6,), ((1, 2),), seed=11)
    drawn = {"policy": "drawn", "batch": capture.to_dict()}
    r = cause_without_replay(
        HangsInReplay, CheckOptions(engine=engine), fault([Batch((1,), (2,), ((1,),), seed=5)], 0, 1, drawn)
    )
    (f,) = r.findings
    assert f.capture_batch == capture and "captured 6" in f.message


@pytest.mark.parametrize(
    "buggy, safe",
    [(LazyTokenMetadata, TokenMetadataOnDevice), (LazyPlannedSplitKV, PlannedSplitKV)],
    ids=["token-metadata", "split-plan"],
)
def test_a_write_only_the_warm_up_made_is_named_and_its_safe_twin_gets_nothing(engine, buggy, safe):
    spec = buggy.default_spec
    steps = [spec.worst_case_batch(1, query_len=1, seed=21)]
    options = CheckOptions(engine=engine)
    assert cause_without_replay(buggy, options, fault(steps, 0, spec.max_reqs)).kinds == {"lazy-init"}
    assert cause_without_replay(safe, options, fault(steps, 0, spec.max_reqs)).findings == []


@pytest.mark.parametrize("step", [0, 1])
def test_metadata_the_graph_reads_from_the_other_copy_is_named_and_its_safe_twin_gets_nothing(engine, step):
    # a double buffer the graph froze one copy of: this step's prepare() wrote the other
    spec = PingPongMetadata.default_spec
    steps = [spec.worst_case_batch(spec.max_reqs, query_len=1, seed=21), spec.worst_case_batch(2, query_len=1, seed=22)]
    options = CheckOptions(engine=engine)
    buggy = cause_without_replay(PingPongMetadata, options, fault(steps[: step + 1], step, spec.max_reqs))
    assert buggy.kinds == {"unpersisted-metadata"} and buggy.findings[0].where.startswith("self.meta[")
    assert cause_without_replay(PingPongStaging, options, fault(steps[: step + 1], step, spec.max_reqs)).findings == []


def test_a_step_outside_the_example_is_a_usage_error():
    from graphsafe.errors import UsageError

    with pytest.raises(UsageError, match="not one of its example's 1 steps"):
        cause_without_replay(
            HangsInReplay, CheckOptions(engine="emulate"), fault([Batch((1,), (2,), ((1,),), seed=5)], 3, 1)
        )

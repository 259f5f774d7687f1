"""A frozen branch names the finding only where it can explain the difference: a static tensor whose last write
comes before the first launch that differs from an eager run of the batch was not changed by that branch."""

from __future__ import annotations

import graphsafe
from graphsafe import Batch
from tests.targets.late_branch import LateBranch, LateBranchPadSlotZero

#: captured on a full batch (the late launch taken); the step has two requests in four slots (not taken)
CAPTURE = Batch(query_lens=(1,) * 4, seq_lens=(3,) * 4, block_table=((1,), (2,), (3,), (4,)), seed=1)
STEP = Batch(query_lens=(1,) * 2, seq_lens=(3,) * 2, block_table=((3,), (4,)), seed=2)


def reproduce(target: type) -> graphsafe.CheckResult:
    return graphsafe.reproduce(target, [STEP], capture_batch=CAPTURE, capture_size=4, engine="emulate")


def test_state_written_before_a_frozen_branch_is_not_put_down_to_the_branch():
    r = reproduce(LateBranchPadSlotZero)
    assert [f.kind.value for f in r.findings] == ["stale-padding"]
    assert "static['state']" in r.findings[0].message


def test_a_frozen_branch_that_changes_no_value_is_no_finding():
    assert reproduce(LateBranch).ok

"""Two layer groups (global and windowed) on the CPU stand-in, planned as a serving engine plans them: eager plans
each group right before its run, a replay needs both planned in prepare().  One int workspace for both is the
window plan overwriting the global group's schedule, named with both plans; a workspace each is clean."""

from __future__ import annotations

import graphsafe
from tests.targets import flashinfer_groups
from tests.targets.flashinfer_standin import small

# the stand-in's kernels read their schedule on the host: the emulator replays them as watched calls
TwoGroups = small(flashinfer_groups.TwoGroups, __name__, watched=True)
TwoGroupsSharedIntWorkspace = small(flashinfer_groups.TwoGroupsSharedIntWorkspace, __name__, watched=True)


def _check(cls: type):
    return graphsafe.check(
        cls, engine="emulate", device="cpu", seed=0, database=False, isolate="none", examples=10, capture="minimal"
    )


def test_two_groups_with_an_int_workspace_each_are_clean():
    r = _check(TwoGroups)
    assert r.ok, r.findings


def test_eager_plans_each_group_before_its_run_and_the_graph_path_plans_both_in_prepare():
    target = TwoGroupsSharedIntWorkspace()
    target.setup(target.default_spec, "cpu")
    batch = graphsafe.Batch(query_lens=(1, 1), seq_lens=(40, 20), block_table=((3, 4, 5), (7, 2)), seed=1, num_slots=2)
    target.prepare(batch)
    full, window = target.active
    assert (len([c for c in full.calls if c[0] == "plan"]), len([c for c in window.calls if c[0] == "plan"])) == (1, 1)
    target.forward()
    assert [c[0] for c in full.calls] == ["plan", "plan", "run"]
    assert full._int_workspace_buffer.data_ptr() == window._int_workspace_buffer.data_ptr()


def test_one_int_workspace_for_both_groups_names_it_and_both_plans(no_shrinking):
    r = _check(TwoGroupsSharedIntWorkspace)
    assert r.kinds == {"unpersisted-metadata"}, r.findings
    f = r.errors[0]
    assert "_int_workspace_buffer" in f.where, f.where
    assert "self.plan(full" in f.message and "self.plan(window" in f.message, f.message

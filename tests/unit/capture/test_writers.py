"""Line-by-line writers of one prepare() call: each statement's writes into the traced buffers, in order, the
buffers restored afterwards."""

from __future__ import annotations

import torch

from graphsafe.diagnosis.writers import trace_writes


class TwoPlans:
    def __init__(self):
        self.sched = torch.zeros(8, dtype=torch.int32)

    def plan(self, values):
        self.sched[: len(values)] = torch.tensor(values, dtype=torch.int32)

    def prepare(self, batch):
        self.plan([1, 2, 3])
        self.plan([7, 8])
        untouched = 5  # noqa: F841  (a statement that writes nothing)


def test_each_statement_of_prepare_is_one_writer_with_its_line_and_text():
    t = TwoPlans()
    key = t.sched.untyped_storage().data_ptr()
    first, second = trace_writes(t, lambda: t.prepare(None), {key: t.sched})
    assert first.source == "self.plan([1, 2, 3])" and second.source == "self.plan([7, 8])"
    assert first.label.endswith("in prepare") and first.label != second.label
    assert first.mask.view(-1, 4).any(dim=1).tolist() == [True] * 3 + [False] * 5
    assert second.mask.view(-1, 4).any(dim=1).tolist() == [True] * 2 + [False] * 6  # 3 kept its value
    assert second.after.view(torch.int32)[:3].tolist() == [7, 8, 3]


def test_the_traced_buffers_are_restored():
    t = TwoPlans()
    trace_writes(t, lambda: t.prepare(None), {t.sched.untyped_storage().data_ptr(): t.sched})
    assert t.sched.tolist() == [0] * 8


def test_a_line_that_runs_twice_says_which_run_wrote():
    class Loop(TwoPlans):
        def prepare(self, batch):
            for values in ([1, 2], [3, 4]):
                self.plan(values)

    t = Loop()
    writes = trace_writes(t, lambda: t.prepare(None), {t.sched.untyped_storage().data_ptr(): t.sched})
    assert [w.label.endswith("(its run 2)") for w in writes] == [False, True]

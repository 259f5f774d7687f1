"""unpersisted-metadata's two-writers shape: a region two launches of the graph read, which two statements of
this step's prepare() wrote (the later over the earlier, neither a plain fill), is named with both statements;
one reader, or a later fill, is not that mistake."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from graphsafe.engines.launches import Launch, TensorArg
from graphsafe.probes.unpersisted_metadata import _overwritten


class Groups:
    def __init__(self, second=(7, 8, 9, 10)):
        self.sched = torch.zeros(8, dtype=torch.int32)
        self.second = second

    def plan(self, values):
        self.sched[: len(values)] = torch.tensor(values, dtype=torch.int32)

    def prepare(self, batch):
        self.plan([1, 2, 3, 4])
        self.plan(list(self.second))


def ctx_for(target: Groups, readers: int):
    key = target.sched.untyped_storage().data_ptr()
    arg = TensorArg(key, "torch.int32", (4,), (1,), 0, False)
    launches = [Launch("triton", f"group{i}", {"sched": arg}) for i in range(readers)]
    ledger = SimpleNamespace(written=lambda k: k == key)
    evidence = SimpleNamespace(
        graph_read_tensors={key: target.sched}, ledger=ledger, name=lambda k, lo, hi: f"self.sched[{lo}:{hi}]"
    )
    return SimpleNamespace(
        evidence=evidence,
        info=SimpleNamespace(launches=launches, graph_map=None, paths={key: ["self.sched"]}),
        session=SimpleNamespace(target=target),
        padded_batch=None,
    )


def test_a_region_two_launches_read_that_two_statements_wrote_names_both():
    f = _overwritten(ctx_for(Groups(), readers=2))
    assert f is not None and f.kind.value == "unpersisted-metadata"
    assert f.details["writers"][0] != f.details["writers"][1]
    assert "`self.plan([1, 2, 3, 4])`" in f.message and "`self.plan(list(self.second))`" in f.message


def test_a_region_one_launch_reads_is_not_two_writers():
    assert _overwritten(ctx_for(Groups(), readers=1)) is None


def test_a_later_fill_is_a_reset_not_a_second_writer():
    assert _overwritten(ctx_for(Groups(second=(0, 0, 0, 0)), readers=2)) is None

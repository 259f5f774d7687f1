"""unpersisted-metadata's two-writers shape: a region two launches of the graph read, which two statements of
this step's prepare() wrote (the later over the earlier, neither a plain fill), is named with both statements;
one reader, or a later fill, is not that mistake.  A graph node's pointer reads the array that starts there (up to
the next array any node points at), past a first entry both writes agree on."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from graphsafe.capture.graph_map import TARGET, GraphMap, Pointer, map_graph
from graphsafe.diagnosis.probes.unpersisted_metadata import _overwritten
from graphsafe.engines.graph_reader import GraphRead, Node
from graphsafe.engines.launches import Launch, TensorArg
from tests.fixtures.graphs import load


class Groups:
    def __init__(self, second=(7, 8, 9, 10), at=0):
        self.sched = torch.zeros(8, dtype=torch.int32)
        self.second = second
        self.at = at  # where in the buffer the plans write their schedule

    def plan(self, values):
        self.sched[self.at : self.at + len(values)] = torch.tensor(values, dtype=torch.int32)

    def prepare(self, batch):
        self.plan([1, 2, 3, 4])
        self.plan(list(self.second))


def nodes_of(launches: list[Launch], key: int, nbytes: int) -> GraphMap:
    """The graph a GPU captures of ``launches``: one kernel node each, pointing where its argument starts."""
    nodes = [Node(i, "kernel", name=launch.name) for i, launch in enumerate(launches)]
    pointers = [Pointer(i, n.label, 0, 0, key, TARGET, key=key, at=0) for i, n in enumerate(nodes)]
    return GraphMap(GraphRead(nodes), pointers, {key: ["self.sched"]}, {key: nbytes})


def ctx_for(target: Groups, readers: int, shape=(4,), eager_same: bool = False, graph: bool = False):
    key = target.sched.untyped_storage().data_ptr()
    arg = TensorArg(key, "torch.int32", shape, (1,), 0, False)
    launches = [Launch("triton", f"group{i}", {"sched": arg}) for i in range(readers)]
    gmap = nodes_of(launches, key, target.sched.untyped_storage().nbytes()) if graph else None
    ledger = SimpleNamespace(written=lambda k: k == key)
    evidence = SimpleNamespace(
        graph_read_tensors={key: target.sched},
        ledger=ledger,
        name=lambda k, lo, hi: f"self.sched[{lo}:{hi}]",
        eager_reads_the_same=lambda k, lo, hi: eager_same,
        claims=[],
    )
    evidence.claim = lambda probe, k, region: evidence.claims.append((probe, k, *region))
    return SimpleNamespace(
        evidence=evidence,
        info=SimpleNamespace(launches=launches, graph_map=gmap, paths={key: ["self.sched"]}),
        session=SimpleNamespace(target=target),
        padded_batch=None,
    )


def test_a_region_two_launches_read_that_two_statements_wrote_names_both():
    f = _overwritten(ctx_for(Groups(), readers=2))
    assert f is not None and f.kind.value == "unpersisted-metadata"
    assert f.details["writers"][0] != f.details["writers"][1]
    assert "`self.plan([1, 2, 3, 4])`" in f.message and "`self.plan(list(self.second))`" in f.message


def test_two_writers_claim_the_bytes_they_name_for_the_claim_experiment():
    ctx = ctx_for(Groups(), readers=2)
    f = _overwritten(ctx)
    [(probe, key, lo, hi)] = ctx.evidence.claims
    assert probe == "unpersisted-metadata" and f.where == f"self.sched[{lo}:{hi}]"


def test_a_region_whose_readers_read_what_eager_reads_is_not_two_writers():
    # a prepare() that calls its parent's and then fixes part of it: written twice, and the graph reads what eager does
    assert _overwritten(ctx_for(Groups(), readers=2, eager_same=True)) is None


def test_a_region_one_launch_reads_is_not_two_writers():
    assert _overwritten(ctx_for(Groups(), readers=1)) is None


def test_a_launchs_own_graph_node_is_the_same_reader_not_a_second():
    # on a GPU the graph reader sees the recorded launch's kernel again as a node pointing at the same buffer
    assert _overwritten(ctx_for(Groups(), readers=1, graph=True, eager_same=True)) is None


def test_two_launches_seen_in_the_graph_too_are_still_two_readers():
    f = _overwritten(ctx_for(Groups(), readers=2, graph=True))
    assert f is not None and f.details["origin"] == "overwritten"


def test_a_later_fill_is_a_reset_not_a_second_writer():
    assert _overwritten(ctx_for(Groups(second=(0, 0, 0, 0)), readers=2)) is None


class ResetThenWrite(Groups):
    """Safe: prepare() zeroes the buffer, then writes this batch's one value; the graph reads the final bytes."""

    def prepare(self, batch):
        self.sched.zero_()
        self.sched[:1] = torch.tensor([7], dtype=torch.int32)


def test_a_reset_that_changed_one_word_is_still_a_reset_not_a_second_writer():
    target = ResetThenWrite()
    target.prepare(None)  # the trace starts from this step's prepared bytes: the zero_() changes word 0 only
    assert _overwritten(ctx_for(target, readers=2)) is None


def test_two_writes_past_the_start_of_a_region_two_launches_read_name_where_they_overlap():
    # a library call reads its whole workspace; the plans write their schedule past its first word
    f = _overwritten(ctx_for(Groups(at=2), readers=2, shape=(8,)))
    assert f is not None and f.where == "self.sched[8:24]", f


class SharedSchedule:
    """Two plans into one int workspace laid out as FlashInfer's decode plan lays it out on a GPU (the fixture's
    offsets): each array's first entry alike (request 0 starts at tile 0), the tiles after it differ."""

    def __init__(self, nbytes: int, at: int):
        self.int_workspace = torch.zeros(nbytes // 4, dtype=torch.int32)
        self.at = at // 4

    def plan(self, tiles):
        self.int_workspace[self.at : self.at + len(tiles)] = torch.tensor(tiles, dtype=torch.int32)

    def prepare(self, batch):
        self.plan([0, 1, 2, 3])  # the global group: long requests split into tiles
        self.plan([0, 0, 1, 1])  # the window group: fewer tiles


def fixture_ctx(target: SharedSchedule | None = None, at: int = 0):
    rec = load("flashinfer_two_groups")
    gmap = map_graph(rec.read, rec.sizes, rec.paths, rec.space)
    key = rec.address("int_workspace")
    target = target or SharedSchedule(rec.sizes[key], at=at)
    return SimpleNamespace(
        evidence=SimpleNamespace(
            graph_read_tensors={key: target.int_workspace},
            ledger=SimpleNamespace(written=lambda k: k == key),
            name=lambda k, lo, hi: f"self.int_workspace[{lo}:{hi}]",
            claim=lambda probe, k, region: None,
        ),
        info=SimpleNamespace(launches=[], graph_map=gmap, paths=rec.paths),
        session=SimpleNamespace(target=target),
        padded_batch=None,
    )


def test_two_plans_into_the_arrays_two_recorded_graph_nodes_read_name_both():
    f = _overwritten(fixture_ctx(at=2384))  # where both groups' decode kernels (nodes 0, 2) point
    assert f is not None and f.where == "self.int_workspace[2388:2400]", f
    assert "`self.plan([0, 1, 2, 3])" in f.message and "`self.plan([0, 0, 1, 1])" in f.message


class OneWord(SharedSchedule):
    def prepare(self, batch):
        self.plan([4])  # the global group's chunk size
        self.plan([1])  # the window group's


def test_two_plans_of_one_word_two_graph_nodes_read_are_two_writers_not_a_fill():
    rec = load("flashinfer_two_groups")
    target = OneWord(rec.sizes[rec.address("int_workspace")], at=7148)  # the next array any node reads: 7152
    f = _overwritten(fixture_ctx(target))
    assert f is not None and f.where == "self.int_workspace[7148:7152]", f


def test_a_triton_launch_and_its_node_in_a_graph_read_on_a_gpu_are_one_reader():
    from graphsafe.diagnosis.probes.unpersisted_metadata import _readers

    rec = load("triton_add")  # add_k(x, y, o) captured on an H200 and read back: one kernel node
    gmap = map_graph(rec.read, rec.sizes, rec.paths, rec.space)
    args = {n: TensorArg(rec.address(n), "torch.float32", (1000,), (1,), 0, False) for n in ("x", "y", "o")}
    ctx = SimpleNamespace(info=SimpleNamespace(launches=[Launch("triton", "add_k", args)], graph_map=gmap))
    readers = _readers(ctx)
    assert all(who == {("launch", 0)} for by in readers.values() for _, who in by.values()), readers
    # a kernel the recorder did not see (another name) is a reader of its own
    ctx.info.launches = [Launch("triton", "other_k", args)]
    assert {("launch", 0), ("node", 0)} in [who for by in _readers(ctx).values() for _, who in by.values()]

"""Two captures diffed node by node: addresses compared by where they point in the target, every other
parameter byte by value (named by the kernel's C++ parameter type), a different node sequence a branch, and
whatever a control capture of the same batch shows differing left out."""

from __future__ import annotations

import struct
from dataclasses import replace

from graphsafe.capture.graph_diff import diff_graphs, noise_of
from graphsafe.capture.graph_map import map_graph
from graphsafe.engines.graph_reader import GraphRead
from tests.fixtures.graphs import load


def mapped(rec, read: GraphRead | None = None):
    return map_graph(read or rec.read, rec.sizes, rec.paths, rec.space)


def with_param(read: GraphRead, node: int, param: int, data: bytes) -> GraphRead:
    nodes = list(read.nodes)
    n = nodes[node]
    params = tuple(replace(p, data=data) if p.index == param else p for p in n.params)
    nodes[node] = replace(n, params=params)
    return GraphRead(nodes)


def test_a_graph_equals_itself():
    rec = load("extension")
    assert diff_graphs(mapped(rec), mapped(rec)) == []


def test_a_different_scalar_is_a_frozen_value_named_by_kernel_parameter_and_type():
    rec = load("extension")
    other = with_param(rec.read, 1, 4, struct.pack("<f", 0.125))
    [d] = diff_graphs(mapped(rec), mapped(rec, other))
    assert (d["kernel"], d["argument"], d["captured"], d["needed"]) == (
        "gs_scale_rows",
        "parameter 4 (float)",
        0.25,
        0.125,
    )
    assert d["kind"] == "argument" and d["where"] == "graph node 1"


def test_a_pointer_to_the_same_buffer_elsewhere_in_memory_is_no_difference():
    rec = load("extension")
    out = rec.address("out")
    moved = out + (1 << 20)  # another instance's "self.out"
    other_sizes = {**{k: v for k, v in rec.sizes.items() if k != out}, moved: rec.sizes[out]}
    other_paths = {**{k: v for k, v in rec.paths.items() if k != out}, moved: ["self.out"]}
    other_space = rec.space
    other_space._kinds[moved] = "device"
    read = rec.read
    for node in (0, 1):
        prm = next(p for p in read.nodes[node].params if int.from_bytes(p.data, "little") == out)
        read = with_param(read, node, prm.index, moved.to_bytes(8, "little"))
    b = map_graph(read, other_sizes, other_paths, other_space)
    assert diff_graphs(mapped(rec), b) == []


def test_a_pointer_to_another_offset_of_the_same_buffer_is_a_frozen_value():
    rec = load("extension")
    out = rec.address("out")
    read = with_param(rec.read, 1, 1, (out + 256).to_bytes(8, "little"))  # scale_rows writes from row 1 on
    [d] = diff_graphs(mapped(rec), mapped(rec, read))
    assert (d["argument"], d["captured"], d["needed"]) == (
        "parameter 1 (float*), bytes 0:8",
        "self.out +0",
        "self.out +256",
    )


def test_a_different_grid_is_a_frozen_value():
    rec = load("flashinfer_decode")
    nodes = list(rec.read.nodes)
    nodes[0] = replace(nodes[0], grid=(300, 2, 1))
    [d] = diff_graphs(mapped(rec), mapped(rec, GraphRead(nodes)))
    assert (d["kernel"], d["argument"], d["captured"], d["needed"]) == (
        "BatchDecodeWithPagedKVCacheKernel",
        "grid",
        (594, 2, 1),
        (300, 2, 1),
    )


def test_a_missing_kernel_is_a_frozen_branch():
    rec = load("flashinfer_decode")
    [d] = diff_graphs(mapped(rec, GraphRead(rec.read.nodes[:1])), mapped(rec))
    assert d["kind"] == "branch"
    assert (d["captured"], d["needed"]) == ([], ["PersistentVariableLengthMergeStatesKernel"])


def test_a_value_inside_a_by_value_struct_is_named_by_its_bytes():
    rec = load("flashinfer_decode")
    [struct_param] = rec.read.nodes[0].params
    data = bytearray(struct_param.data)
    data[168:172] = (7).to_bytes(4, "little")
    [d] = diff_graphs(mapped(rec), mapped(rec, with_param(rec.read, 0, 0, bytes(data))))
    assert d["argument"] == "parameter 0 (Params), bytes 168:172" and d["needed"] == 7


def test_what_a_control_capture_shows_differing_is_left_out():
    rec = load("extension")
    noisy = with_param(rec.read, 1, 3, (99).to_bytes(4, "little"))  # a word that differs between two captures
    control = diff_graphs(mapped(rec), mapped(rec, noisy))
    both = with_param(with_param(noisy, 1, 4, struct.pack("<f", 2.0)), 1, 3, (98).to_bytes(4, "little"))
    [d] = diff_graphs(mapped(rec), mapped(rec, both), noise_of(control))
    assert d["argument"] == "parameter 4 (float)"


def test_two_groups_planned_into_one_int_workspace_read_the_same_offsets():
    rec = load("flashinfer_two_groups")
    gmap = mapped(rec)
    int_ws = rec.address("int_workspace")
    per_node = {}
    for p in gmap.pointers:
        if p.key == int_ws:
            per_node.setdefault(p.node, set()).add(p.at)
    assert per_node[0] == per_node[2]  # both groups' decode kernels read one schedule's place


def test_param_with_unknown_type_is_compared_as_integers():
    rec = load("triton_add")
    other = with_param(rec.read, 0, 3, (999).to_bytes(4, "little"))
    [d] = diff_graphs(mapped(rec), mapped(rec, other))
    assert (d["argument"], d["captured"], d["needed"]) == ("parameter 3", 1000, 999)


def test_two_addresses_the_driver_could_not_place_are_no_frozen_value():
    rec = load("extension")
    a = with_param(rec.read, 2, 5, (0x7F00_1234_0000).to_bytes(8, "little"))  # e.g. a pool temporary, freed
    b = with_param(rec.read, 2, 5, (0x7F00_5678_0000).to_bytes(8, "little"))  # another capture's temporary
    assert diff_graphs(mapped(rec, a), mapped(rec, b)) == []


def test_a_different_64_bit_count_in_the_same_place_is_a_frozen_value():
    rec = load("extension")
    a = with_param(rec.read, 2, 5, (5).to_bytes(8, "little"))
    b = with_param(rec.read, 2, 5, (7).to_bytes(8, "little"))
    [d] = diff_graphs(mapped(rec, a), mapped(rec, b))
    assert (d["kernel"], d["captured"], d["needed"]) == ("gs_spin_until", 5, 7)

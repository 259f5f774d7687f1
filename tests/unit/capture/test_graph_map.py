"""Graphs recorded on a GPU mapped onto the tensors they were captured with: every address in a kernel's
parameters (a by-value struct's included, cuBLAS's packed buffer included) and in memcpy nodes lands in the
storage that holds it, by path; host memory the target does not hold is what the graph reads from the host."""

from __future__ import annotations

import torch

from graphsafe.capture.graph_map import TARGET, attach, map_graph
from graphsafe.engines.recording import Recorder
from tests.fixtures.graphs import load


def mapped(case: str):
    rec = load(case)
    return rec, map_graph(rec.read, rec.sizes, rec.paths, rec.space)


def targets(gmap, node: int) -> list[tuple[int, int, str]]:
    """(parameter, offset, path +at) of every pointer of one node into a held storage."""
    return [(p.param, p.offset, gmap.name(p)) for p in gmap.pointers if p.node == node and p.kind == TARGET]


def test_an_extension_kernels_pointer_parameters_are_named_by_path():
    rec, gmap = mapped("extension")
    assert targets(gmap, 0) == [(0, 0, "self.table"), (1, 0, "self.idx"), (2, 0, "self.out")]
    assert targets(gmap, 1) == [(0, 0, "self.x"), (1, 0, "self.out")]  # the scalars are no pointers
    assert targets(gmap, 2)[0] == (0, 0, "self.flag")


def test_a_cublas_kernels_packed_parameters_point_at_its_operands():
    rec, gmap = mapped("cublas_fp16")
    held = {gmap.name(p).split(" ")[0] for p in gmap.pointers if p.kind == TARGET}
    assert held == {"self.a", "self.w", "self.output"}


def test_the_same_through_an_extension_that_calls_cublas_itself():
    rec, gmap = mapped("extension_cublas")
    assert {gmap.name(p).split(" ")[0] for p in gmap.pointers if p.kind == TARGET} == {"self.a", "self.w", "self.out"}


def test_flashinfer_decode_points_at_q_the_caches_both_workspaces_and_the_output():
    rec, gmap = mapped("flashinfer_decode")
    decode = targets(gmap, 0)
    assert decode[0] == (0, 0, "self.q")  # the by-value struct begins with q's pointer
    names = {n.split(" ")[0] for _, _, n in decode}
    assert {"self.kv", "self.workspace", "self.int_workspace", "self.indptr", "self.indices", "self.last"} <= names
    merge = {n.split(" ")[0] for _, _, n in targets(gmap, 1)}
    assert merge == {"self.workspace", "self.int_workspace", "self.out"}


def test_pointers_into_a_storage_keep_their_offset():
    rec, gmap = mapped("flashinfer_decode")
    offsets = sorted(p.at for p in gmap.pointers if p.kind == TARGET and p.key == rec.address("int_workspace"))
    assert offsets[0] == 0 and len(set(offsets)) > 1  # the plan's arrays at several offsets of one buffer


def test_cublaslt_split_k_host_stack_words_are_host_addresses_but_no_host_reads():
    rec, gmap = mapped("cublas_splitk")
    reduce_node = gmap.read.kernels()[1].index
    host = [(p.param, p.kind) for p in gmap.pointers if p.node == reduce_node and p.kind == "host"]
    assert (5, "host") in host and (6, "host") in host  # pageable: a kernel cannot dereference them
    assert gmap.host_reads() == []


def test_a_memcpy_from_a_pinned_buffer_the_target_holds_is_an_input():
    rec, gmap = mapped("memcpy_pinned")
    src = [p for p in gmap.pointers if p.role == "source" and p.node == 0]
    assert [(p.kind, gmap.name(p)) for p in src] == [(TARGET, "self.src_pinned")]
    assert gmap.host_reads() == []
    assert rec.address("d") in gmap.written and rec.address("d2") in gmap.written  # memcpy destinations


def test_a_memcpy_from_a_pinned_temporary_is_a_host_read():
    rec, gmap = mapped("memcpy_pinned_temporary")
    [read] = gmap.host_reads()
    assert (read.role, read.kind) == ("source", "host-pinned")
    assert read.value == rec.raw["temporaries"][-1]  # the capture's own temporary, freed after it
    assert read.where() == "memcpy (node 0) source"


def test_the_default_mode_index_buffers_are_pointed_at_by_the_decode_kernel():
    rec, gmap = mapped("flashinfer_decode_default_mode")
    names = {n for _, _, n in targets(gmap, 0)}
    assert {"self.indptr", "self.indices"} <= names


def test_attach_adds_the_storages_the_graph_points_into_with_where_it_reads_them():
    x = torch.zeros(16)
    key = x.untyped_storage().data_ptr()
    rec = load("extension")
    table = rec.address("table")
    # the recorded graph, remapped onto this process's tensor: its table is ours
    gmap = map_graph(rec.read, {table: 4096}, {table: ["self.table"]}, rec.space)
    gmap.pointers = [p.__class__(**{**p.__dict__, "key": key}) if p.kind == TARGET else p for p in gmap.pointers]
    recorder = Recorder("capture")
    attach(gmap, recorder, {key: x})
    buf = recorder.external[key]
    assert buf.kernels == ["gs_gather_rows"] and buf.refs == ["gs_gather_rows (node 0) parameter 0, bytes 0:8"]
    assert buf.alive() and buf.nbytes == x.untyped_storage().nbytes()
    assert buf.graph_only  # an address in a parameter: checked for liveness, not taken for a read
    del x
    assert not buf.alive()  # the weak reference: nothing but the graph holds it now

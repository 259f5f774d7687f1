"""The graph reader past the driver: nodes recorded on a GPU (tests/fixtures/graphs) parse back into the same
nodes, kernel names demangle into names and parameter types, and a packed ``extra`` parameter list (cuBLAS's
launches) is read only where this process can read memory."""

from __future__ import annotations

import ctypes
import json
import struct

import pytest

from graphsafe.engines import graph_reader
from graphsafe.engines.addresses import AddressSpace, KnownSpace, plausible
from graphsafe.engines.graph_reader import GraphRead, Param, param_types, short_name
from tests.fixtures.graphs import HERE, load

CASES = sorted(p.stem for p in HERE.glob("*.json"))


@pytest.mark.parametrize("case", CASES)
def test_a_recorded_graph_round_trips_through_its_json_form(case):
    raw = json.loads((HERE / f"{case}.json").read_text())
    assert GraphRead.from_dict(raw).to_dict()["nodes"] == raw["nodes"]


def test_every_recorded_kernel_had_its_parameters_read():
    for case in CASES:
        for node in load(case).read.kernels():
            assert node.source in ("kernelParams", "extra"), (case, node.label)


def test_an_extension_kernel_has_one_parameter_per_argument_at_its_offset():
    [gather, scale, spin, acc] = load("extension").read.kernels()
    assert [(p.index, p.offset, p.size) for p in scale.params] == [
        (0, 0, 8),
        (1, 8, 8),
        (2, 16, 4),
        (3, 20, 4),
        (4, 24, 4),
    ]
    assert scale.grid == (4, 1, 1) and scale.block == (64, 1, 1)
    assert param_types(scale.name) == ["float const*", "float*", "int", "int", "float"]
    assert scale.params[4].data == struct.pack("<f", 0.25)  # the host scalar, by value


def test_cublas_hopper_kernels_give_their_parameters_through_extra():
    [node] = load("cublas_fp16").read.kernels()
    assert node.label.startswith("nvjet_sm90") and node.source == "extra"
    assert sum(p.size for p in node.params) > 1000  # one packed buffer of the kernel's parameters


def test_flashinfer_decode_is_two_kernels_with_a_by_value_struct_first():
    decode, merge = load("flashinfer_decode").read.kernels()
    assert decode.label == "BatchDecodeWithPagedKVCacheKernel" and decode.grid == (594, 2, 1)
    assert [p.size for p in decode.params] == [240]
    assert merge.label == "PersistentVariableLengthMergeStatesKernel"


def test_memcpy_and_memset_nodes_keep_their_addresses_and_size():
    copy_in, copy_dd, fill = load("memcpy_pinned").read.nodes
    rec = load("memcpy_pinned")
    assert (copy_in.type, copy_in.src_kind, copy_in.dst_kind, copy_in.nbytes) == ("memcpy", "host", "device", 1024)
    assert copy_in.src == rec.address("src_pinned") and copy_in.dst == rec.address("d")
    assert (copy_dd.src, copy_dd.dst) == (rec.address("d"), rec.address("d2"))
    assert fill.type == "kernel"  # zero_() is a fill kernel, not a memset node


def test_short_names_drop_namespaces_templates_and_parameters():
    assert short_name("_Z13gs_scale_rowsPKfPfiif") == "gs_scale_rows"
    cutlass = "_ZN7cutlass7Kernel2I41cutlass_80_simt_sgemm_64x64_8x5_nn_align1EEvNT_6ParamsE"
    assert short_name(cutlass) == "Kernel2"
    assert short_name("nvjet_sm90_hsh_64x8_64x16_1x4_h_bz_NNT") == "nvjet_sm90_hsh_64x8_64x16_1x4_h_bz_NNT"
    assert param_types("add_k") is None  # a Triton kernel's name carries no signature


def test_words_are_the_aligned_eight_byte_words_of_a_parameter():
    p = Param(0, 4, bytes(range(20)))  # starts at offset 4: its first aligned word is at 4 bytes in
    assert [o for o, _ in p.words()] == [4, 12]


def _extra_list(pairs: list[tuple[int, int]]):
    arr = (ctypes.c_size_t * (2 * len(pairs)))(*[x for pair in pairs for x in pair])
    return arr, ctypes.addressof(arr)


def test_an_extra_list_gives_the_packed_buffer_it_points_to():
    buf = (ctypes.c_ubyte * 24)(*range(24))
    size = ctypes.c_size_t(24)
    keep, addr = _extra_list([(1, ctypes.addressof(buf)), (2, ctypes.addressof(size)), (0, 0)])
    assert graph_reader._extra_buffer(addr, AddressSpace()) == bytes(range(24))


def test_an_extra_list_pointing_to_unmapped_memory_is_not_read():
    size = ctypes.c_size_t(24)
    keep, addr = _extra_list([(1, 1 << 20), (2, ctypes.addressof(size)), (0, 0)])  # no buffer there
    assert graph_reader._extra_buffer(addr, AddressSpace()) is None
    assert graph_reader._extra_buffer(4096, AddressSpace()) is None  # nor a list at an unmapped address


def test_the_address_space_knows_readable_host_memory():
    buf = ctypes.create_string_buffer(64)
    space = AddressSpace()
    assert space.readable(ctypes.addressof(buf), 64)
    assert not space.readable(16, 8)


def test_small_words_and_non_addresses_are_no_pointers():
    assert not plausible(0) and not plausible(4096) and not plausible(1 << 60)
    space = KnownSpace({140513275543552: "device"})
    assert space.kind(140513275543552) == "device" and space.kind(12345678) is None


def test_without_cuda_bindings_the_reader_says_what_to_install(monkeypatch):
    graph_reader._import_error.cache_clear()
    modules = __import__("sys").modules
    for name in [m for m in modules if m == "cuda" or m.startswith("cuda.")]:
        monkeypatch.delitem(modules, name)  # imported already where cuda-bindings is installed
    monkeypatch.setitem(modules, "cuda", None)
    try:
        assert "pip install 'graphsafe[graph]'" in graph_reader.unavailable()
    finally:
        graph_reader._import_error.cache_clear()


def test_the_reader_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("GRAPHSAFE_GRAPH_READER", "0")
    assert "GRAPHSAFE_GRAPH_READER=0" in graph_reader.unavailable()

"""The CPU emulator records exactly what a capture freezes and replays exactly that."""

import pytest
import torch
import triton
import triton.language as tl

import graphsafe
from graphsafe.engines import get_engine
from graphsafe.engines.recording import CaptureError
from tests.targets import synthetic as S


@pytest.fixture
def emu():
    return get_engine("emulate")


@triton.autotune(configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 8})], key=["n"])
@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


def test_replay_of_a_safe_target_equals_eager_bitwise(emu):
    spec = S.SPEC
    g, e = S.Safe(), S.Safe()
    for t in (g, e):
        t.setup(spec, emu.device)
    g.prepare(spec.worst_case_batch(4))
    graph = emu.capture(g.forward, pool=None)
    batch = graphsafe.Batch((1, 2), (3, 9), ((1,), (2, 3, 4)), seed=5)
    g.prepare(batch.padded(4))
    graph.outputs[0].fill_(float("nan"))
    graph.replay()
    e.prepare(batch)
    ref = e.forward()
    assert torch.equal(graph.outputs[0][: batch.num_tokens], ref[: batch.num_tokens])


def test_in_place_ops_rerun_on_the_captured_tensors(emu):
    x = torch.zeros(3, device=emu.device)
    graph = emu.capture(lambda: x.add_(1.0), pool=None)
    assert x.tolist() == [1.0] * 3  # capture executes once, like a warm-up
    graph.replay()
    graph.replay()
    assert x.tolist() == [3.0] * 3


def test_functional_ops_write_into_the_tensor_they_produced_at_capture(emu):
    x = torch.ones(2, device=emu.device)
    graph = emu.capture(lambda: x * 2.0, pool=None)
    out = graph.outputs[0]
    ident = id(out)
    x.fill_(5.0)
    graph.replay()
    assert id(graph.outputs[0]) == ident and out.tolist() == [10.0, 10.0]


def test_view_ops_are_not_rerun_the_captured_view_aliases(emu):
    buf = torch.arange(6.0, device=emu.device)
    graph = emu.capture(lambda: buf[2:4] * 1.0, pool=None)
    buf.copy_(torch.arange(6.0) * 10)
    graph.replay()
    assert graph.outputs[0].tolist() == [20.0, 30.0]


def test_python_host_values_are_frozen_at_capture(emu):
    state = {"scale": 2.0}
    x = torch.ones(2, device=emu.device)
    graph = emu.capture(lambda: x * state["scale"], pool=None)
    state["scale"] = 7.0
    graph.replay()
    assert graph.outputs[0].tolist() == [2.0, 2.0]


def test_a_dropped_tensor_leaves_the_graph_reading_its_old_contents(emu):
    holder = {"x": torch.full((2,), 3.0, device=emu.device)}
    graph = emu.capture(lambda: holder["x"] + 0.0, pool=None)
    holder["x"] = torch.full((2,), 9.0, device=emu.device)  # the captured tensor is dropped
    graph.replay()
    assert graph.outputs[0].tolist() == [3.0, 3.0]
    assert len(graph.dead_inputs()) == 1


def test_a_live_input_is_not_reported_dead(emu):
    x = torch.ones(2, device=emu.device)
    graph = emu.capture(lambda: x + 1.0, pool=None)
    assert graph.dead_inputs() == []


def test_host_sync_on_graph_data_is_a_capture_error_naming_op_and_line(emu):
    x = torch.ones(2, device=emu.device)

    def forward():
        y = x * 2
        if y.sum().item() > 0:  # graph data read back to the host
            return y
        return y + 1

    with pytest.raises(CaptureError, match=r"_local_scalar_dense.*test_emulator.py:\d+"):
        emu.capture(forward, pool=None)


def test_repeat_interleave_by_an_int_reads_nothing_back_and_replays_the_new_values(emu):
    x = torch.ones(2, device=emu.device)

    def forward():
        return (x * 2).repeat_interleave(3, dim=0)  # the output size is known on the host: no sync

    graph = emu.capture(forward, pool=None)
    x.fill_(5.0)
    graph.replay()
    assert graph.outputs[0].tolist() == [10.0] * 6 and not graph.recording.notes


def test_host_read_of_a_device_input_is_a_capture_error(emu):
    n = torch.tensor([3], device=emu.device)  # device memory a prepare() would write
    x = torch.ones(2, device=emu.device)
    with pytest.raises(CaptureError, match=r"_local_scalar_dense reads device data back to the host"):
        emu.capture(lambda: x * float(n.item()), pool=None)


def test_host_read_of_a_host_tensor_is_a_note_and_its_value_is_frozen(emu):
    with emu.host_memory():  # what graphsafe wraps setup() in: the emulator learns what is host memory
        n = torch.tensor([3])  # no device: host memory
        x = torch.ones(2, device=emu.device)
    graph = emu.capture(lambda: x * float(n.item()), pool=None)
    assert any("host read of a host tensor" in note for note in graph.recording.notes)
    n.fill_(5)
    graph.replay()
    assert graph.outputs[0].tolist() == [3.0, 3.0]


def test_ops_on_host_memory_run_once_at_capture_and_not_on_replay(emu):
    with emu.host_memory():
        h = torch.zeros(2)
        x = torch.ones(2, device=emu.device)

    def forward():
        h.add_(1.0)  # host work: CUDA runs it while capturing, a replay does not
        return x * 2.0

    graph = emu.capture(forward, pool=None)
    graph.replay()
    assert h.tolist() == [1.0, 1.0]
    assert h.untyped_storage().data_ptr() not in graph.recording.external  # not memory the graph reads


def test_tensor_from_host_data_on_the_device_is_a_capture_error(emu):
    x = torch.ones(3, device=emu.device)
    with pytest.raises(CaptureError, match=r"torch.tensor\(host data, device=...\).*pageable host memory"):
        emu.capture(lambda: x * torch.tensor([1.0, 2.0, 3.0], device=emu.device), pool=None)


def test_a_non_blocking_copy_from_pinned_host_memory_replays_and_a_pageable_one_is_refused(emu):
    with emu.host_memory():
        pinned = torch.zeros(3, pin_memory=torch.cuda.is_available())  # pinned where the GPU can pin
        pageable = torch.zeros(3)
        out = torch.zeros(3, device=emu.device)
    graph = emu.capture(lambda: out.copy_(pinned, non_blocking=True), pool=None)
    pinned.fill_(4.0)
    graph.replay()
    assert out.tolist() == [4.0] * 3
    with pytest.raises(CaptureError, match="pageable host memory"):
        emu.capture(lambda: out.copy_(pageable, non_blocking=True), pool=None)


def test_repeat_interleave_with_output_size_replays_with_new_counts(emu):
    counts = torch.tensor([1, 3, 0], device=emu.device)
    ids = torch.arange(3, device=emu.device)
    graph = emu.capture(lambda: torch.repeat_interleave(ids, counts, output_size=4), pool=None)
    counts.copy_(torch.tensor([2, 0, 2]))
    graph.replay()
    assert graph.outputs[0].tolist() == [0, 0, 2, 2]


def test_repeat_interleave_without_output_size_is_a_capture_error(emu):
    counts = torch.tensor([1, 3, 0], device=emu.device)
    ids = torch.arange(3, device=emu.device)
    with pytest.raises(CaptureError, match="repeat_interleave reads device data back to the host"):
        emu.capture(lambda: torch.repeat_interleave(ids, counts), pool=None)


def test_a_private_generator_is_a_capture_error_and_the_default_one_draws_anew(emu):
    gen = torch.Generator(device=emu.device)
    with pytest.raises(CaptureError, match="torch.Generator of its own"):
        emu.capture(lambda: torch.rand(4, device=emu.device, generator=gen), pool=None)
    graph = emu.capture(lambda: torch.rand(4, device=emu.device), pool=None)
    first = graph.outputs[0].clone()
    graph.replay()
    assert not torch.equal(first, graph.outputs[0])


def test_a_python_scalar_stored_through_a_mask_is_the_graphs_own_not_freed_memory(emu):
    x = torch.arange(4.0, device=emu.device)
    mask = torch.tensor([True, False, True, False], device=emu.device)

    def forward():
        x[mask] = 0.0  # a masked fill of a scalar torch wraps in a tensor
        return x

    graph = emu.capture(forward, pool=None)
    x.copy_(torch.arange(4.0) + 1)
    mask.copy_(torch.tensor([False, True, False, True]))
    graph.replay()
    assert x.tolist() == [1.0, 0.0, 3.0, 0.0] and graph.dead_inputs() == []


def test_triton_launches_replay_with_the_grid_and_scalars_frozen_at_capture(emu):
    g = S.HostScale()
    g.setup(S.SPEC, emu.device)
    g.prepare(S.SPEC.worst_case_batch(4))
    graph = emu.capture(g.forward, pool=None)
    [launch] = [l for l in graph.recording.launches if l.kind == "triton"]
    assert launch.name == "_scale_rows_host" and launch.grid == (8, 1, 1)[: len(launch.grid)]
    assert launch.args["scale"] == 16.0
    g.prepare(graphsafe.Batch((1,), (2,), ((1,),), seed=3).padded(4))
    graph.replay()
    x = g.x[0]
    assert torch.allclose(graph.outputs[0][0], x * 16.0 + g.w)


def test_autotuned_kernels_keep_the_config_chosen_at_capture(emu):
    x = torch.zeros(16, device=emu.device)
    box = {"n": 16}

    def forward():
        _add_one[lambda m: (triton.cdiv(box["n"], m["BLOCK"]),)](x, box["n"])
        return x

    forward()  # warm-up: the autotuner benchmarks here, as serving engines arrange
    x.zero_()
    graph = emu.capture(forward, pool=None)
    [launch] = [l for l in graph.recording.launches if l.kind == "triton"]
    # the config the autotuner chose in warm-up (on a GPU by timing, under the interpreter its
    # deterministic stand-in keeps the first config) is the one frozen into the graph
    assert launch.args["BLOCK"] == _add_one.best_config.kwargs["BLOCK"]
    box["n"] = 8
    graph.replay()
    assert x.tolist() == [2.0] * 16  # n frozen at 16: the whole buffer was updated again


def test_capturing_is_true_only_inside_capture(emu):
    seen = []
    emu.capture(lambda: seen.append(graphsafe.capturing()) or torch.ones(1, device=emu.device), pool=None)
    assert seen == [True] and graphsafe.capturing() is False

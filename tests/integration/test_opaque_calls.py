"""Calls graphsafe cannot see into (an extension reached through TVM-FFI or pybind11), declared with
``graphsafe.opaque_call``: recorded as one launch, replayed by the emulator, and named in findings like
any Triton argument (``tests/targets/opaque.py``)."""

from __future__ import annotations

import torch

import graphsafe
from graphsafe.engines.recording import Recorder
from tests.targets import opaque as T


def check(cls, engine, examples=6):
    return graphsafe.check(cls, engine=engine, examples=examples, seed=0, database=False, capture="worst")


def test_an_opaque_call_is_one_launch_with_its_tensors_and_host_values():
    x, lens, out = torch.ones(2, 3), torch.tensor([1.0, 2.0]), torch.zeros(2, 3)
    with Recorder("observe") as rec:
        graphsafe.opaque_call(
            "ext.scale",
            T.ext_scale,
            x,
            lens,
            out,
            3.0,
            arg_names=("x", "lens", "out", "factor"),
            host_values={"plan.split": 2},
        )
    [launch] = rec.launches  # the torch ops inside the call are not recorded
    assert (launch.kind, launch.name) == ("opaque", "ext.scale")
    assert launch.args["factor"] == 3.0 and launch.args["plan.split"] == 2
    assert launch.args["lens"].shape == (2,)
    assert torch.equal(out, torch.tensor([[1.0] * 3, [2.0] * 3]) * 3.0)


def test_an_argument_named_none_is_left_out_of_the_record():
    x, lens, out = torch.ones(1, 1), torch.ones(1), torch.zeros(1, 1)
    with Recorder("observe") as rec:
        graphsafe.opaque_call("ext.scale", T.ext_scale, x, lens, out, 1.0, arg_names=("x", "lens", "out", None))
    assert set(rec.launches[0].args) == {"x", "lens", "out"}


def test_an_opaque_call_outside_a_recorder_is_just_the_call():
    out = torch.zeros(1, 2)
    graphsafe.opaque_call("ext.scale", T.ext_scale, torch.ones(1, 2), torch.ones(1), out, 2.0)
    assert torch.equal(out, torch.full((1, 2), 2.0))


def test_warm_up_learns_which_arguments_an_opaque_call_writes():
    x, lens, out = torch.ones(2, 3), torch.ones(2), torch.zeros(2, 3)
    with Recorder("observe", learn_writes=True) as rec:
        graphsafe.opaque_call("ext.scale", T.ext_scale, x, lens, out, 1.0, arg_names=("x", "lens", "out", "factor"))
    assert rec.kernel_writes == {("ext.scale", "out")}


def test_the_emulator_replays_an_opaque_call_with_the_host_values_it_was_captured_with():
    from graphsafe.engines import get_engine

    x, lens, out = torch.ones(1, 2), torch.ones(1), torch.zeros(1, 2)
    state = {"factor": 2.0}
    graph = get_engine("emulate").capture(
        lambda: graphsafe.opaque_call("ext.scale", T.ext_scale, x, lens, out, state["factor"]) or out, pool=None
    )
    state["factor"], lens[0] = 10.0, 3.0  # a new host value is not seen; new buffer contents are
    out.zero_()
    graph.replay()
    assert torch.equal(out, torch.full((1, 2), 6.0))


def test_a_safe_target_calling_an_opaque_kernel_gets_no_finding(engine):
    result = check(T.OpaqueSafe, engine)
    assert result.ok, result.summary()


def test_a_buffer_only_an_opaque_call_reads_that_prepare_rebinds_is_a_stale_pointer_naming_it(engine):
    result = check(T.OpaqueFreshLens, engine)
    [f] = result.errors
    assert (f.kind.value, f.where) == ("stale-pointer", "self.lens"), result.summary()
    assert "ext.scale" in f.message


def test_a_host_value_an_opaque_call_froze_is_a_frozen_host_value_naming_the_argument(engine):
    result = check(T.OpaqueFrozenFactor, engine)
    [f] = result.errors
    assert (f.kind.value, f.where) == ("frozen-host-value", "ext.scale.factor"), result.summary()


def test_warm_up_names_a_kernel_it_examined_even_when_no_write_was_seen():
    x, lens, out = torch.ones(2, 3), torch.ones(2), torch.ones(2, 3)  # out already holds what the call writes
    with Recorder("observe", learn_writes=True) as rec:
        graphsafe.opaque_call("ext.scale", T.ext_scale, x, lens, out, 1.0, arg_names=("x", "lens", "out", "factor"))
    assert rec.kernel_writes == set()
    assert rec.learned_kernels == {("ext.scale", frozenset({"x", "lens", "out"}))}


def test_warm_up_does_not_learn_again_a_kernel_an_earlier_warm_up_examined():
    x, lens, out = torch.ones(2, 3), torch.ones(2), torch.zeros(2, 3)
    rec = Recorder("observe", learn_writes=True)
    rec.known_kernels = {("ext.scale", frozenset({"x", "lens", "out"}))}
    with rec:
        graphsafe.opaque_call("ext.scale", T.ext_scale, x, lens, out, 1.0, arg_names=("x", "lens", "out", "factor"))
    assert rec.kernel_writes == set() and rec.learned_kernels == set()
    assert len(rec.launches) == 1, "the launch is still recorded"


def test_warm_up_learns_again_a_kernel_called_with_other_tensor_arguments():
    x, lens, out = torch.ones(2, 3), torch.ones(2), torch.zeros(2, 3)
    rec = Recorder("observe", learn_writes=True)
    rec.known_kernels = {("ext.scale", frozenset({"x", "lens"}))}  # examined when ``out`` was not a tensor
    with rec:
        graphsafe.opaque_call("ext.scale", T.ext_scale, x, lens, out, 1.0, arg_names=("x", "lens", "out", "factor"))
    assert rec.kernel_writes == {("ext.scale", "out")}

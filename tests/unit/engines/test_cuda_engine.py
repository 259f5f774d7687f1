"""The real CUDA engine: behaviours only a GPU shows (the whole module skips without one)."""

from __future__ import annotations

import gc

import pytest
import torch

pytestmark = pytest.mark.cuda  # skipped where CUDA is not available (tests/conftest.py)


@pytest.fixture
def cuda_engine():
    from graphsafe.engines.cuda import CudaEngine

    return CudaEngine()


@pytest.fixture
def collect_on_every_allocation():
    """Make Python's cyclic collector run at (almost) every object allocation, then restore it."""
    before = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1, 1, 1)
    yield
    gc.set_threshold(*before)
    gc.collect()


def _captured_graph() -> torch.cuda.CUDAGraph:
    x = torch.zeros(16, device="cuda")
    old = torch.cuda.CUDAGraph()
    with torch.cuda.graph(old):
        x.add_(1)
    return old


def test_capture_survives_a_collection_that_would_destroy_an_old_graph(cuda_engine, collect_on_every_allocation):
    keep = [_captured_graph()]
    x = torch.ones(16, device="cuda")

    def forward():
        # the old graph is now held only by a young reference cycle: a collection during the
        # capture frees it, and destroying a graph mid-capture invalidates the capture
        cycle = {"graph": keep.pop()}
        cycle["self"] = cycle
        del cycle
        junk = [[i] for i in range(200)]  # allocations that run the collector if it is on
        del junk
        return x * 2

    graph = cuda_engine.capture(forward, pool=cuda_engine.new_pool())
    x.fill_(3)
    graph.replay()
    cuda_engine.synchronize()
    assert torch.equal(graph.outputs[0], torch.full((16,), 6.0, device="cuda"))
    assert gc.isenabled()  # switched back on after the capture


def test_collector_stays_off_when_it_was_off_before_the_capture(cuda_engine):
    x = torch.ones(4, device="cuda")
    gc.disable()
    try:
        cuda_engine.capture(lambda: x + 1, pool=cuda_engine.new_pool())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_plain_item_in_capture_is_stopped_before_cuda_sees_it(cuda_engine):
    from graphsafe.engines.recording import CaptureError

    x = torch.ones(4, device="cuda")
    with pytest.raises(CaptureError, match="_local_scalar_dense"):
        cuda_engine.capture(lambda: x + x.sum().item(), pool=cuda_engine.new_pool())
    assert cuda_engine.healthy()  # the recorder raised before the driver saw a host read


@pytest.fixture
def installed_clock():
    """A hang-watch clock installed for the test, as a sandbox child does; uninstalled after."""
    import ctypes
    from multiprocessing.sharedctypes import RawArray

    from graphsafe.engines import replay_clock

    clock = replay_clock.Clock(RawArray(ctypes.c_double, replay_clock.NUMBERS), RawArray(ctypes.c_char, 64))
    replay_clock.install(clock)
    yield clock
    replay_clock.install(None)


def test_healthy_ends_a_replay_left_unwaited_on_the_hang_clock(cuda_engine, installed_clock):
    from graphsafe.engines import replay_clock

    replay_clock.replay_started(4)  # a replay launched and not yet waited for
    assert installed_clock.overdue(now=1e12) is not None
    assert cuda_engine.healthy()
    assert installed_clock.overdue(now=1e12) is None, "healthy() waited for the device: the replay is over"

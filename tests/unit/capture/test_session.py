"""A capture session's per-step and per-example upkeep: the NaN poison before prepare and the reset to the
post-capture buffers."""

import torch

from graphsafe.capture.session import CaptureSession
from graphsafe.capture.statewalk import byte_view
from graphsafe.engines import get_engine
from tests.targets import synthetic as S


class WithIndex(S.Safe):
    """The synthetic safe target with an integer buffer (never poisoned) beside its floating ones."""

    def setup(self, spec, device):
        super().setup(spec, device)
        self.index = torch.arange(spec.max_reqs, dtype=torch.int32, device=device)


class ReadsTheIndex(WithIndex):
    """The same, its graph reading the integer buffer too."""

    def forward(self):
        return super().forward().add_(self.index[0])


def session(cls: type = WithIndex) -> CaptureSession:
    return CaptureSession(cls, S.SPEC, get_engine("emulate"), (1, 2, 4))


def all_ones(t: torch.Tensor) -> bool:
    return bool((byte_view(t) == 255).all())


def test_poison_fills_every_floating_buffer_but_the_static_ones_with_all_ones_bytes():
    s = session()
    g = s.target
    w = g.w.clone()
    s.poison()
    for t in (g.x, g.lens, g.out):
        assert all_ones(t)
    assert torch.equal(g.w, w), "static tensors are not poisoned"
    assert g.index.tolist() == list(range(S.SPEC.max_reqs)), "integer buffers are not poisoned"


def test_reset_gives_back_the_post_capture_bytes_of_the_buffers_the_poison_leaves_alone():
    s = session(ReadsTheIndex)
    g = s.target
    after_capture = g.index.clone()
    g.index.fill_(7)  # as a prepare() would
    s.reset(seed=3)
    assert torch.equal(g.index, after_capture)


def test_reset_leaves_the_floating_buffers_poisoned_as_the_first_step_needs_them():
    s = session(ReadsTheIndex)
    g = s.target
    g.x.zero_()
    s.reset(seed=3)
    for t in (g.x, g.lens, g.out):
        assert all_ones(t)
    g.x.zero_()
    s.poison()  # the example's first step: reset() poisoned already, nothing ran between
    assert not all_ones(g.x)
    s.poison()  # every later step poisons again
    assert all_ones(g.x)


def test_reset_reseeds_the_static_buffers():
    s = session()
    g = s.target
    s.reset(seed=3)
    w3 = g.w.clone()
    s.reset(seed=4)
    assert not torch.equal(g.w, w3)
    s.reset(seed=3)
    assert torch.equal(g.w, w3)


def test_a_session_names_every_kernel_its_warm_ups_examined():
    learned = session().learned_writes()
    assert learned.kernels, "the synthetic target launches Triton kernels"
    assert {kernel for kernel, _ in learned.pairs} <= {kernel for kernel, _ in learned.kernels}


def test_a_session_given_what_another_learned_knows_the_same_writes_without_learning_them(monkeypatch):
    first = session()
    learned = first.learned_writes()
    engine = get_engine("emulate")
    warm_ups = []
    warmup = engine.warmup
    monkeypatch.setattr(engine, "warmup", lambda fn, **kw: warm_ups.append(warmup(fn, **kw)) or warm_ups[-1])
    second = CaptureSession(WithIndex, S.SPEC, engine, (1, 2, 4), known_writes=learned)
    assert len(warm_ups) == 3 and not any(rec.learned_kernels for rec in warm_ups)
    assert second.learned_writes() == learned
    for size, info in second.infos.items():
        assert info.warmup_kernel_writes == first.infos[size].warmup_kernel_writes


class CapturePrepared(WithIndex):
    """Records which path prepared each batch."""

    def setup(self, spec, device):
        super().setup(spec, device)
        self.paths = []

    def prepare(self, batch):
        self.paths.append("step")
        super().prepare(batch)

    def prepare_capture(self, batch):
        self.paths.append("capture")
        super().prepare(batch)


def test_a_session_prepares_each_capture_batch_through_prepare_capture():
    s = session(CapturePrepared)
    assert s.target.paths[:3] == ["capture"] * 3 and "step" not in s.target.paths

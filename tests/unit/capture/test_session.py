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


def session() -> CaptureSession:
    return CaptureSession(WithIndex, S.SPEC, get_engine("emulate"), (1, 2, 4))


def test_poison_fills_every_floating_buffer_but_the_static_ones_with_all_ones_bytes():
    s = session()
    g = s.target
    w = g.w.clone()
    s.poison()
    for t in (g.x, g.lens, g.out):
        assert bool((byte_view(t) == 255).all())
    assert torch.equal(g.w, w), "static tensors are not poisoned"
    assert g.index.tolist() == list(range(S.SPEC.max_reqs)), "integer buffers are not poisoned"


def test_reset_gives_back_the_post_capture_buffers_and_reseeds_the_static_ones():
    s = session()
    g = s.target
    after_capture = {n: getattr(g, n).clone() for n in ("x", "lens", "out")}
    s.poison()
    s.reset(seed=3)
    for n, t in after_capture.items():  # the buffers the graphs read
        assert torch.equal(byte_view(getattr(g, n)), byte_view(t)), n
    w3 = g.w.clone()
    s.reset(seed=4)
    assert not torch.equal(g.w, w3)
    s.reset(seed=3)
    assert torch.equal(g.w, w3)

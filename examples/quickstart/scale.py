"""The quick start's target: a backend that scales each token's row by its request's sequence length.

``Scale`` is safe to capture.  The two subclasses make the most common mistake, rebinding a buffer the
graph captured instead of writing into it, in its two forms::

    cd examples/quickstart
    graphsafe check scale:Scale            # exit 0: no finding
    graphsafe check scale:ScaleFreshLens   # exit 1: stale-pointer at self.lens
    graphsafe check scale:ScaleKeptLens    # exit 1: unpersisted-metadata at self.lens
"""

import torch

import graphsafe
from graphsafe import CaptureSpec, Support


class Scale(graphsafe.Target):
    """Safe: every per-step value is written into a buffer allocated once in setup()."""

    support = Support.ALWAYS
    default_spec = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=64, block_size=16)

    def setup(self, spec, device):
        t = spec.max_reqs * spec.max_query_len  # every token slot of the largest graph
        self.x = torch.zeros(t, 8, device=device)  # persistent input buffer
        self.lens = torch.zeros(t, device=device)  # per-token metadata, read on the device
        self.out = torch.zeros(t, 8, device=device)

    def prepare(self, batch):  # host work before each replay: write into the persistent buffers
        n = batch.num_tokens
        self.x[:n] = graphsafe.seeded((n, 8), seed=batch.seed, device=self.x.device)
        self.x[n:] = 0  # padding made harmless
        per_token = [float(s) for s, q in zip(batch.seq_lens, batch.query_lens) for _ in range(q)]
        self.lens[:n] = torch.tensor(per_token)
        self.lens[n:] = 0

    def forward(self):  # the captured region: no host values that depend on the batch
        torch.mul(self.x, self.lens[:, None], out=self.out)
        return self.out


class ScaleFreshLens(Scale):
    """Buggy: prepare() rebinds self.lens to a new tensor, and the one the graph captured is freed."""

    expected = "stale-pointer"

    def prepare(self, batch):
        self.lens = torch.zeros_like(self.lens)
        super().prepare(batch)


class ScaleKeptLens(Scale):
    """Buggy: prepare() rebinds self.lens while the captured tensor stays alive, never written again."""

    expected = "unpersisted-metadata"

    def setup(self, spec, device):
        super().setup(spec, device)
        self.history = []

    def prepare(self, batch):
        self.history.append(self.lens)
        self.lens = torch.zeros_like(self.lens)
        super().prepare(batch)

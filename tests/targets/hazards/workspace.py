"""Workspaces and accumulators inside the captured region (plain-torch paged decode).

``FixedWorkspace`` computes the attention scores into a workspace allocated once for the
spec's maximum.  ``SplitAccumulate`` accumulates the attention output over key splits
with ``acc += ...`` into a persistent accumulator that ``forward`` zeroes first.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import torch  # noqa: E402

from graphsafe import Batch, CaptureSpec  # noqa: E402

from ._common import SCALE, D, H  # noqa: E402
from .paged_decode import PagedDecode  # noqa: E402

SPEC = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=16, block_size=4)
NUM_SPLITS = 2


class FixedWorkspace(PagedDecode):
    """Safe: the score workspace ``[max_reqs * H, 1, L]`` is allocated in ``setup``.

    Every graph size uses a prefix of it; graphs replay one at a time, so sharing it is fine.
    """

    default_spec = SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.L = self.bps * self.bs
        self.ws = torch.empty(spec.max_reqs * H, 1, self.L, device=self.device)

    def workspace(self, n: int) -> torch.Tensor:
        return self.ws[: n * H]

    def attend(self, n: int, guard: bool = True) -> torch.Tensor:
        k, v = self.gather_kv(n)  # [n, L, H, D]
        ws = self.workspace(n)
        q = self.query(n).reshape(n * H, 1, D)
        kt = k.permute(0, 2, 3, 1).reshape(n * H, D, self.L)
        torch.bmm(q, kt, out=ws)  # scores into the workspace
        scores = ws.view(n, H, self.L) * SCALE
        valid = torch.arange(self.L, device=self.device)[None, :] < self.seq_lens[:n, None]
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        p = torch.softmax(scores, dim=-1)
        p = torch.where((self.seq_lens[:n] > 0)[:, None, None], p, 0.0)
        return torch.einsum("nhl,nlhd->nhd", p, v)


class GrowingWorkspace(FixedWorkspace):
    """Buggy (workspace aliasing / capture order): ``forward`` grows the workspace to fit.

    How it happens: the wrapper allocates the workspace lazily, the first time a batch
    needs more rows than it has (``if self.ws is None or too small: self.ws = torch.empty``).
    Captured largest size first (graphsafe's and most engines' order) every graph shares the
    first, largest workspace and nothing breaks.  Captured ascending (SGLang #26532, #22930),
    each larger capture replaces the workspace and drops the one the smaller graph baked in:
    the smaller graph then writes scores into freed memory.  Expected: stale-pointer (only
    reachable when sizes are captured in ascending order).
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.ws = None

    def workspace(self, n: int) -> torch.Tensor:
        if self.ws is None or self.ws.shape[0] < n * H:
            self.ws = torch.empty(n * H, 1, self.L, device=self.device)
        return self.ws[: n * H]


class SplitAccumulate(PagedDecode):
    """Safe: output accumulated over key splits into a persistent accumulator, zeroed in forward.

    Pass one computes each row's log-sum-exp over all keys; pass two adds each split's
    ``exp(s - lse) @ v`` into ``self.acc`` (``acc += ...``, the split-K / atomic-add style);
    the bf16 output is cast from the fp32 accumulator.
    """

    default_spec = SPEC

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.acc = torch.zeros(spec.max_reqs, H, D, device=self.device)

    def reset_acc(self, n: int) -> None:
        self.acc[:n].zero_()

    def attend(self, n: int, guard: bool = True) -> torch.Tensor:
        k, v = self.gather_kv(n)
        L = k.shape[1]
        scores = torch.einsum("nhd,nlhd->nhl", self.query(n), k) * SCALE
        valid = (torch.arange(L, device=self.device)[None, :] < self.seq_lens[:n, None])[:, None, :]
        scores = scores.masked_fill(~valid, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        self.reset_acc(n)
        acc = self.acc[:n]
        split = L // NUM_SPLITS
        for s in range(NUM_SPLITS):
            sl = slice(s * split, (s + 1) * split)
            p = torch.where(valid[..., sl], torch.exp(scores[..., sl] - lse), 0.0)
            acc += torch.einsum("nhl,nlhd->nhd", p, v[:, sl])
        return acc.to(torch.bfloat16)  # the output (bf16) is a new tensor; acc stays fp32


class AccumulatorZeroedInPrepare(SplitAccumulate):
    """Buggy (nondeterministic replay): the accumulator is zeroed by ``prepare``, not in the graph.

    How it happens: the metadata builder "clears the workspace" for the step on the host
    side; ``forward`` only does ``acc += ...``.  One replay per prepare is right, but the
    graph is not idempotent: replaying it again without a prepare (a retry, a second graph
    launch for the same step, a profiling run) doubles the output.  Expected:
    nondeterministic-replay.
    """

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        self.acc.zero_()

    def reset_acc(self, n: int) -> None:
        pass

"""One conformance case: a tiny target whose ``forward()`` is one op or a short idiom, and its registry.

Every case is a :class:`graphsafe.Target` over the persistent buffers of :class:`OpCase`, which
``prepare()`` rewrites from the batch's seed (and a host int ``n`` that changes with it), so a graph
that replays correctly gives eager's values for every new batch.  A case names its family, what it
needs (an op this torch may lack, Triton, ``torch.compile``), and how a replay is judged:

* ``compare`` (default): the replayed outputs equal a fresh eager instance's for the same batch;
* ``fresh``: random draws; each replay must draw anew (two replays of one batch differ) and every draw
  must pass the case's validity check (values in range, categories that have probability).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import graphsafe
from graphsafe import Batch, CaptureSpec, Support

__all__ = ["Case", "OpCase", "CASES", "case", "N", "D", "R", "V", "SPEC", "batch", "has_op", "pin"]

N, D, R, V = 16, 8, 4, 10  # rows, columns, requests (counts sum to N), categories
SPEC = CaptureSpec(max_reqs=1, max_query_len=1, max_seq_len=16, block_size=16)


def batch(seed: int) -> Batch:
    """The batch whose seed fixes every input of a step."""
    return Batch((1,), (1,), ((1,),), seed=seed)


def pin() -> bool:
    """Pin host buffers where a GPU can (a CPU-only torch cannot pin memory at all)."""
    return torch.cuda.is_available()


class OpCase(graphsafe.Target):
    """Persistent inputs every case reads; ``prepare()`` rewrites all of them.

    ``x``, ``y`` (N, D) and ``v`` (N) floats; ``w`` (D, D) weights; ``idx`` rows in [0, N) with
    repeats; ``perm`` a permutation of [0, N); ``mask`` (N) and ``mask2`` (N, D) booleans; ``counts``
    (R) >= 0 summing to N; ``cats`` (N) in [0, V); ``onehot`` (N, V) one certain category per row (a
    draw from it is determined); ``p01`` (N, D) probabilities 0 or 1; ``state`` (N, D) state that
    forward() may update (prepare() rewrites it too); ``out`` (N, D) an output buffer; ``scalar`` a 0-dim
    device value; ``n`` a host int in [3, 7] and ``n_dev`` the same on the device; ``py_scale`` a host
    float.  ``more(device)`` allocates a case's own buffers and ``refill(gen)`` rewrites them.
    """

    support = Support.ALWAYS
    default_spec = SPEC

    def setup(self, spec: CaptureSpec, device: torch.device) -> None:
        self.device = device
        f = {"device": device}
        self.x, self.y, self.v = torch.zeros(N, D, **f), torch.zeros(N, D, **f), torch.zeros(N, **f)
        self.w = torch.zeros(D, D, **f)
        self.idx = torch.zeros(N, dtype=torch.long, **f)
        self.perm = torch.zeros(N, dtype=torch.long, **f)
        self.mask = torch.zeros(N, dtype=torch.bool, **f)
        self.mask2 = torch.zeros(N, D, dtype=torch.bool, **f)
        self.counts = torch.zeros(R, dtype=torch.long, **f)
        self.cats = torch.zeros(N, dtype=torch.long, **f)
        self.onehot = torch.zeros(N, V, **f)
        self.p01 = torch.zeros(N, D, **f)
        self.state = torch.zeros(N, D, **f)
        self.out = torch.zeros(N, D, **f)
        self.scalar = torch.zeros((), **f)
        self.n_dev = torch.zeros(1, dtype=torch.long, **f)
        self.n, self.py_scale = 3, 1.0
        self.more(device)

    def more(self, device: torch.device) -> None:
        """A case's own persistent buffers."""

    def refill(self, gen: torch.Generator) -> None:
        """Rewrite a case's own buffers for a new batch."""

    def prepare(self, batch: Batch) -> None:
        s = batch.seed
        g = torch.Generator().manual_seed(s)
        self.x.copy_(torch.randn(N, D, generator=g))
        self.y.copy_(torch.randn(N, D, generator=g))
        self.v.copy_(torch.randn(N, generator=g))
        self.w.copy_(torch.randn(D, D, generator=g) / D**0.5)
        self.idx.copy_(torch.randint(0, N, (N,), generator=g))
        self.perm.copy_(torch.randperm(N, generator=g))
        self.mask.copy_(torch.rand(N, generator=g) < 0.5)
        self.mask2.copy_(torch.rand(N, D, generator=g) < 0.5)
        cuts = torch.sort(torch.randint(0, N + 1, (R - 1,), generator=g)).values
        bounds = torch.cat([torch.zeros(1, dtype=torch.long), cuts, torch.full((1,), N)])
        self.counts.copy_(bounds[1:] - bounds[:-1])
        self.cats.copy_(torch.randint(0, V, (N,), generator=g))
        self.onehot.copy_(torch.nn.functional.one_hot(torch.randint(0, V, (N,), generator=g), V).float())
        self.p01.copy_((torch.rand(N, D, generator=g) < 0.5).float())
        self.state.copy_(torch.randn(N, D, generator=g))
        self.out.zero_()
        self.scalar.fill_(float(torch.randn((), generator=g)))
        self.n = 3 + s % 5
        self.n_dev.fill_(self.n)
        self.py_scale = 1.0 + s % 5
        self.refill(g)

    def live(self, outputs, batch):
        return outputs


@dataclass(frozen=True)
class Case:
    """A conformance case: ``cls`` is the target; ``needs()`` says why it cannot run here (None: it can)."""

    name: str
    family: str
    cls: type
    check: str = "compare"  # or "fresh"
    valid: Callable | None = None  # fresh: is one replay's draw valid?  (outputs, instance) -> bool
    needs: Callable[[], str | None] = field(default=lambda: None)
    note: str = ""

    def unavailable(self) -> str | None:
        return self.needs()


CASES: dict[str, Case] = {}


def case(
    name: str,
    family: str,
    *,
    base: type = OpCase,
    more: Callable | None = None,
    refill: Callable | None = None,
    check: str = "compare",
    valid: Callable | None = None,
    needs: Callable[[], str | None] | None = None,
    note: str = "",
):
    """Register ``fn(self)`` as the ``forward()`` of a case named ``family.name``."""

    def register(fn: Callable) -> Callable:
        full = f"{family}.{name}"
        if full in CASES:
            raise ValueError(f"conformance case {full} is registered twice")
        body = {"forward": lambda self: fn(self), "__doc__": fn.__doc__ or note, "__module__": fn.__module__}
        if more is not None:
            body["more"] = more
        if refill is not None:
            body["refill"] = refill
        cls = type("Case_" + full.replace(".", "_"), (base,), body)
        kwargs = {"needs": needs} if needs is not None else {}
        CASES[full] = Case(full, family, cls, check, valid, note=note or (fn.__doc__ or "").strip(), **kwargs)
        return fn

    return register


def has_op(path: str) -> Callable[[], str | None]:
    """``needs`` for an op this torch may lack: ``has_op("torch.nonzero_static")``."""

    def needs() -> str | None:
        obj = torch
        for part in path.split(".")[1:]:
            obj = getattr(obj, part, None)
            if obj is None:
                return f"{path} does not exist in torch {torch.__version__}"
        return None

    return needs

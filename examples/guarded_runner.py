#!/usr/bin/env python3
"""A serving engine's graph runner, shaped like vLLM's CUDAGraphWrapper / SGLang's CudaGraphRunner,
with graphsafe.guard on: it catches a dead or rebound graph input on the first replay.

The runner captures one graph per batch size (largest first, as most engines do; ``--order
ascending`` as some do), each after ``prepare`` of the worst-case batch of that size and one
eager warm-up; then per step it pads the batch to the smallest captured size that holds it,
runs the backend's host-side ``prepare``, asks the guard, and replays.  The backends are
graphsafe's reference targets (``setup(spec, device)``, ``prepare(batch)``, ``forward()``)::

    python examples/guarded_runner.py flex:fresh_metadata            # unpersisted-metadata on step 0
    python examples/guarded_runner.py flashmla_fp8:fresh_buffers     # stale-pointer on step 0
    python examples/guarded_runner.py flex:batch_sized_buffers --order ascending   # stale-pointer
    python examples/guarded_runner.py triton_mla:capture_max_seq_len # frozen-host-value (split_len)
    python examples/guarded_runner.py flex --steps 200 --mode strict # fixed: no finding

Options: ``--engine auto|cuda|emulate``, ``--mode off|sample|strict``, ``--every N``,
``--on-failure raise|log``, ``--report-dir DIR``, ``--steps N``, ``--seed S``.  Exit status 1
when the guard made a finding, 0 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphsafe.engines.triton_env import use_interpreter  # noqa: E402

use_interpreter()  # before any Triton kernel is defined (a no-op on a GPU machine)

import torch  # noqa: E402

import graphsafe  # noqa: E402
from graphsafe import Batch, CaptureSpec, Support, reference  # noqa: E402
from graphsafe.engines import get_engine  # noqa: E402

#: host values each backend computes per step in prepare(), named as its Triton kernels' arguments;
#: the runner passes them so the guard can compare them with what the capture froze
HOST_VALUES: dict[str, Callable[[Any], dict[str, Any]]] = {
    "triton_mla": lambda b: {"latent_attention_partial_kernel.split_len": b.split_len},
    "mla_indexer": lambda b: {"_expand_tokens_kernel.UNIFORM": bool(getattr(b, "uniform", False))},
}


def draw_batch(rng: random.Random, spec: CaptureSpec, support: Support, seed: int) -> Batch:
    """A random batch the backend's ``support`` allows: 1..max_reqs requests, lengths up to the spec's."""
    n = rng.randint(1, spec.max_reqs)
    if support == Support.UNIFORM_SINGLE_TOKEN_DECODE:
        q = [1] * n
    elif support == Support.UNIFORM_BATCH:
        q = [rng.randint(1, spec.max_query_len)] * n
    else:
        q = [rng.randint(1, spec.max_query_len) for _ in range(n)]
    seq = [rng.randint(qi, spec.max_seq_len) for qi in q]
    free = list(range(1, spec.num_blocks))
    rng.shuffle(free)
    table = []
    for s in seq:
        k = math.ceil(s / spec.block_size)
        table.append(tuple(free[:k]))
        del free[:k]
    return Batch(tuple(q), tuple(seq), tuple(table), seed=seed)


class GraphRunner:
    """Capture per size, pad, prepare, guard, replay: the loop of an engine's graph runner."""

    def __init__(
        self,
        backend_cls: type,
        *,
        engine: str = "auto",
        guard_options: dict | None = None,
        order: str = "descending",
        spec: CaptureSpec | None = None,
        sizes: tuple[int, ...] | None = None,
    ):
        self.engine = get_engine(engine)
        self.spec = spec or backend_cls.default_spec
        self.backend = backend_cls()
        self.backend.setup(self.spec, self.engine.device)
        name = getattr(backend_cls, "name", "") or f"{backend_cls.__module__}:{backend_cls.__qualname__}"
        # the guard watches the backend: its attributes hold the persistent buffers the graphs read
        self.guard = graphsafe.guard.Guard(self.backend, target=name, **(guard_options or {}))
        self.host_values = HOST_VALUES.get(name.split(":")[0])
        # called by the guard only on the replays it checks (built once: nothing allocated per step)
        self._needs = (lambda: self.host_values(self.backend)) if self.host_values else None
        self.sizes = tuple(sorted(sizes or self.spec.default_capture_sizes(), reverse=order == "descending"))
        self.graphs: dict[int, Any] = {}
        self.pool = self.engine.new_pool()

    def capture(self, *more_guards: graphsafe.guard.Guard) -> None:
        """Capture every size; ``more_guards`` record the same captures too (guards nest)."""
        q = 1 if self.backend.support == Support.UNIFORM_SINGLE_TOKEN_DECODE else self.spec.max_query_len
        with torch.no_grad():
            for size in self.sizes:
                self.backend.prepare(self.spec.worst_case_batch(size, query_len=q).padded(size))
                self.engine.warmup(self.backend.forward, skip_keys=set())
                with contextlib.ExitStack() as stack:
                    for guard in (self.guard, *more_guards):
                        stack.enter_context(guard.capture(key=size))
                    self.graphs[size] = self.engine.capture(self.backend.forward, pool=self.pool)

    def step(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        """Run one batch through its graph; returns the graph's outputs (padded rows included)."""
        size = min(s for s in self.graphs if s >= batch.num_reqs)
        with torch.no_grad():
            self.backend.prepare(batch.padded(size))
            self.guard.before_replay(size, self._needs)
            graph = self.graphs[size]
            graph.replay()
        return graph.outputs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("backend", help="a graphsafe reference target, e.g. flex or flex:fresh_metadata")
    ap.add_argument("--engine", default="auto", choices=("auto", "cuda", "emulate"))
    ap.add_argument("--mode", default="sample", choices=graphsafe.guard.MODES)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--on-failure", default="raise", choices=graphsafe.guard.ON_FAILURE)
    ap.add_argument("--report-dir", default=None)
    ap.add_argument("--order", default="descending", choices=("descending", "ascending"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    runner = GraphRunner(
        reference.resolve(a.backend),
        engine=a.engine,
        order=a.order,
        guard_options=dict(mode=a.mode, every=a.every, on_failure=a.on_failure, report_dir=a.report_dir),
    )
    runner.capture()
    print(
        f"{a.backend}: captured sizes {list(runner.sizes)} on {runner.engine.name}; guard {a.mode}"
        + (f" 1/{a.every}" if a.mode == "sample" else "")
    )
    rng = random.Random(a.seed)
    for i in range(a.steps):
        batch = draw_batch(rng, runner.spec, runner.backend.support, seed=i + 1)
        try:
            runner.step(batch)
        except graphsafe.GuardError as e:
            print(f"step {i} ({batch.short()}): the guard stopped the replay\n{e.finding.summary()}")
            return 1
    print(f"{a.steps} steps; findings: {len(runner.guard.findings)}")
    for f in runner.guard.findings:
        print(f.summary())
    return 1 if runner.guard.findings else 0


if __name__ == "__main__":
    sys.exit(main())

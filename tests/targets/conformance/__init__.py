"""The emulator's conformance corpus: small cases, each one op or a short idiom inside ``forward()``.

Each case (``case.py``) is a target over persistent buffers that ``prepare()`` rewrites; ``runner.py``
captures it, replays it for new inputs and says what happened: ``capture-failure``, ``replays`` (correct
for every new input) or ``stale`` (and what differs).  ``benchmarks/conformance.py --engine cuda`` records
CUDA's verdicts under a real ``torch.cuda.graph`` (``benchmarks/results/conformance-cuda-gpu.json``);
``tests/integration/test_conformance.py`` runs every case on the CPU emulator and compares.
"""

from __future__ import annotations

from graphsafe.engines.triton_env import use_interpreter

use_interpreter()  # before ops_kernels defines its Triton kernels (a no-op where a GPU is present)

from . import ops_compute, ops_host, ops_idioms, ops_indexing, ops_kernels, ops_memory  # noqa: E402,F401
from .case import CASES, Case  # noqa: E402

__all__ = ["CASES", "Case"]

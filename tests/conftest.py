"""Test set-up: the Triton interpreter on machines without a GPU, engine parametrisation."""

from __future__ import annotations

from graphsafe.engines.triton_env import use_interpreter

# Must run before any @triton.jit kernel (tests/synthetic.py, graphsafe.reference) is defined.
use_interpreter()

import pytest  # noqa: E402
import torch  # noqa: E402

pytest_plugins = ["pytester"]

HAS_CUDA = torch.cuda.is_available()
ENGINES = ["emulate"] + (["cuda"] if HAS_CUDA else [])
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU (CUDA not available on this machine)")


def pytest_generate_tests(metafunc):
    if "engine" in metafunc.fixturenames:
        metafunc.parametrize("engine", ENGINES)

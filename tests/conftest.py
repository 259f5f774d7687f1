"""Test set-up: the Triton interpreter on machines without a GPU, engine parametrisation, and the ``cuda``
marker: a test marked ``@pytest.mark.cuda`` (every test's ``engine="cuda"`` case included) needs an NVIDIA
GPU; where CUDA is not available it is skipped with the reason.  ``pytest -m cuda`` runs just those."""

from __future__ import annotations

from graphsafe.engines.triton_env import use_interpreter

# Must run before any @triton.jit kernel (tests/synthetic.py, graphsafe.reference) is defined.
use_interpreter()

import os  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import Phase, settings  # noqa: E402

pytest_plugins = ["pytester"]

HAS_CUDA = torch.cuda.is_available()
NO_CUDA = "needs an NVIDIA GPU (CUDA not available on this machine)"
needs_cuda = pytest.mark.cuda
ENGINES = ["emulate", pytest.param("cuda", marks=needs_cuda)]


@pytest.fixture(autouse=True)
def _triton_interpreter_setting_restored(monkeypatch):
    """Every test leaves TRITON_INTERPRET as it found it: a test that runs the emulator in this process
    switches it on, and on a GPU machine it must not leak into later tests or their subprocesses (a
    CUDA check under the interpreter copies device memory to the host, a synchronising capture)."""
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))


def pytest_collection_modifyitems(config, items):
    """``cuda``-marked tests skip, saying why, where CUDA is not available."""
    if HAS_CUDA:
        return
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(pytest.mark.skip(reason=NO_CUDA))


def pytest_generate_tests(metafunc):
    if "engine" in metafunc.fixturenames:
        metafunc.parametrize("engine", ENGINES)


@pytest.fixture
def no_shrinking():
    """A finding's first example is enough here: Hypothesis does not shrink it (seconds, not a minute)."""
    previous = settings.get_current_profile_name()
    settings.register_profile(
        "graphsafe-test-no-shrink",
        parent=settings.get_profile(previous),
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
    )
    settings.load_profile("graphsafe-test-no-shrink")
    yield
    settings.load_profile(previous)

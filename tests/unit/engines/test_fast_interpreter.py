"""The emulator's cheaper Triton interpreter set-up computes exactly what the plain interpreter computes."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest

from tests.subprocesses import REPO, env_with_repo

TRITON = tuple(int(x) for x in version("triton").split(".")[:2])
#: graphsafe's emulator needs Triton's interpreter at 3.7 or later (docs/explanation/emulator.md)
needs_interpreter = pytest.mark.skipif(
    TRITON < (3, 7),
    reason=f"the Triton interpreter runs the reference kernels "
    f"from triton 3.7 on; this machine has {version('triton')}",
)

# Runs in a fresh process (the interpreter must be chosen before kernels are defined, and the speed-up
# cannot be taken back): the reference kernels' outputs for the worst-case and the minimal capture
# batches and one decoded step, as one digest.
FORWARDS = """
import hashlib, random, sys
from graphsafe.engines.triton_env import use_interpreter
use_interpreter(force=True)
if sys.argv[1] == "fast":
    from graphsafe.engines.emulate import fast_interpreter
    assert fast_interpreter(), "not installed"
from graphsafe.capture.policies import POLICIES
from graphsafe.capture.statics import randomise_static
from graphsafe.checker import resolve_target
from graphsafe.engines.base import as_outputs
from graphsafe.strategies._encoded import Layout

digest = hashlib.sha256()
for name in sys.argv[2:]:
    cls, _ = resolve_target(name)
    spec, support = cls.default_spec, cls.support
    lay = Layout(spec, support, spec.max_reqs, (64,))
    step = lay.decode(random.Random(name).randbytes(lay.size))[1].padded(spec.max_reqs)
    t = cls()
    t.setup(spec, "cpu")
    randomise_static(t, 1)
    for batch in (POLICIES["worst"].batch_for(spec, support, spec.max_reqs),
                  POLICIES["minimal"].batch_for(spec, support, spec.max_reqs), step):
        t.prepare(batch)
        for out in as_outputs(t.forward()):
            digest.update(out.contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
print(digest.hexdigest())
"""

NAMES = ["triton_mla", "triton_mla:nan_padding", "mla_indexer", "flex", "flashmla_lazy", "flashmla_fp8"]


def _digest(mode: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", FORWARDS, mode, *NAMES],
        cwd=REPO,
        env=env_with_repo(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


@needs_interpreter
def test_the_reference_kernels_give_the_same_bytes_with_and_without_the_faster_interpreter():
    assert _digest("fast") == _digest("plain")


def test_the_faster_interpreter_installs_on_this_triton():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from graphsafe.engines.triton_env import use_interpreter;"
            "use_interpreter(force=True);"
            "from graphsafe.engines.emulate import fast_interpreter; print(fast_interpreter())",
        ],
        cwd=REPO,
        env=env_with_repo(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.strip() == "True", proc.stderr[-2000:]

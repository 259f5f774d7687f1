"""Large static state: a check's extra memory stays near one copy of it, a write outside the batch's
blocks is still caught, and running out of memory is a one-line target error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import graphsafe
from graphsafe import Batch
from graphsafe.capture import statics
from tests.subprocesses import REPO, env_with_repo
from tests.targets import synthetic as S
from tests.targets.paged_kv import PagedKV, StrayWrite, spec_for

MiB = 1 << 20

# Runs one check of PagedKV in a fresh process, on the CPU, and prints its peak resident set size.
_CHILD = """
import json, resource, sys
from graphsafe.engines.triton_env import use_interpreter
use_interpreter()
import graphsafe
from tests.targets.paged_kv import PagedKV, spec_for
r = graphsafe.check(PagedKV, spec=spec_for(int(sys.argv[1])), engine="emulate", device="cpu", examples=5,
                    seed=0, database=False)
print(json.dumps({"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ok": r.ok,
                  "static": spec_for(int(sys.argv[1])).num_blocks * 16 * 128 * 4, "summary": r.summary()}))
"""


def _peak(size: int) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", _CHILD, str(size)],
        cwd=REPO,
        env=env_with_repo(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_64_mib_static_costs_at_most_one_and_a_half_times_its_size():
    """Peak RSS of a check with a 64 MiB cache, less a baseline check of the smallest cache (same
    process kind: imports, capture, Hypothesis) and less the graph instance's own cache: the eager
    instance's copy (1x) and graphsafe's temporaries must stay within 1.5x the cache.  5 examples
    at seed 0 include drawn captures (a second graph instance) and the nondeterminism probe."""
    base, big = _peak(0), _peak(64 * MiB)
    assert base["ok"] and big["ok"], big["summary"]
    extra = big["peak"] - base["peak"] - (big["static"] - base["static"])
    assert extra <= 1.5 * big["static"], f"extra peak {extra / MiB:.0f} MiB for a {big['static'] / MiB:.0f} MiB static"


def test_a_write_outside_the_batchs_blocks_is_caught_at_the_examples_end():
    spec = spec_for(2 * MiB)  # 256 blocks: compared by region at each step
    last = spec.num_blocks - 1
    steps = [Batch((1,), (5,), ((1,),), seed=3), Batch((2, 1), (9, 3), ((2, 3), (4,)), seed=4)]
    assert graphsafe.reproduce(PagedKV, steps, engine="emulate", spec=spec).ok
    r = graphsafe.reproduce(StrayWrite, steps, engine="emulate", spec=spec)
    (f,) = r.findings
    assert f.step == len(steps) - 1  # not seen by the steps' region comparisons
    (m,) = [m for m in f.mismatches if m.tensor == "static['kv_cache']"]
    assert m.total == spec.num_blocks * 16 * 128  # the whole cache, at the example's end
    assert {p["block"] for p in m.first} == {last} and m.first[0]["request"] == -1


class _SetupOOM(S.Safe):
    ERROR = torch.OutOfMemoryError

    def setup(self, spec, device):
        raise self.ERROR("CUDA out of memory. Tried to allocate 2.00 GiB.\nSee the allocator's documentation.")


class _SetupMemoryError(_SetupOOM):
    ERROR = MemoryError


@pytest.mark.parametrize("target", [_SetupOOM, _SetupMemoryError])
def test_out_of_memory_in_setup_is_a_one_line_target_error(target):
    r = graphsafe.check(target, engine="emulate", examples=2, database=False)
    (f,) = r.findings
    assert f.kind.value == "target-error" and f.details["out_of_memory"]
    assert "\n" not in f.message and f.message.startswith(f"setup(spec, device) raised {target.ERROR.__name__}")


def test_graphsafe_running_out_of_memory_for_the_targets_state_is_a_target_error(monkeypatch):
    real = statics.fill_seeded
    calls = []

    def fill(t, seed):
        calls.append(1)
        if len(calls) > 1:  # the main capture's reset passes; an example's copy does not fit
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(t, seed)

    monkeypatch.setattr(statics, "fill_seeded", fill)
    r = graphsafe.check(S.Safe, engine="emulate", examples=2, database=False, seed=0, capture="worst")
    (f,) = r.findings
    assert f.kind.value == "target-error" and f.details["out_of_memory"] and "\n" not in f.message
    assert "checking the target's state raised OutOfMemoryError" in f.message

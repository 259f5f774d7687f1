"""The emulator gives CUDA's verdict, op by op: every conformance case (``tests/targets/conformance``) run on
the CPU emulator is compared with the verdict a real ``torch.cuda.graph`` gave on a GPU
(``benchmarks/results/conformance-cuda-gpu.json``, written by ``benchmarks/conformance.py --engine cuda``).
A case listed in ``limits.EXCEPTIONS`` must give exactly its listed verdict instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import graphsafe
from graphsafe.engines import EmulatorEngine
from graphsafe.engines.triton_env import interpreter_active
from tests.targets.conformance import CASES, limits, runner

ROOT = Path(__file__).resolve().parents[2]
TABLE = json.loads((ROOT / "benchmarks" / "results" / "conformance-cuda-gpu.json").read_text())
CUDA = {c["name"]: c["cuda"] for c in TABLE["cases"]}
DOCS = ROOT / "docs" / "explanation" / "emulator-conformance.md"
#: were the corpus's Triton kernels defined for the interpreter (a machine without a GPU)?  Decided at import,
#: before an engine of this module switches the interpreter on for later kernels
INTERPRETED = interpreter_active()


@pytest.fixture(scope="module")
def emulator():
    return EmulatorEngine("cpu")


@pytest.mark.parametrize("name", list(CASES))
def test_the_emulator_gives_cudas_verdict(name, emulator):
    cuda = CUDA[name]
    if CASES[name].family == "triton" and not INTERPRETED:
        pytest.skip("Triton kernels here are compiled for the GPU; the CPU emulator runs them under the interpreter")
    if cuda["verdict"] == "unavailable":
        pytest.skip(f"not measured on the GPU: {cuda['why']}")
    got = runner.run(CASES[name], "emulate", emulator)
    if got["verdict"] == "unavailable":
        pytest.skip(f"cannot run on this machine: {got['why']}")
    want = limits.EXCEPTIONS[name].emulator if name in limits.EXCEPTIONS else cuda["verdict"]
    assert got["verdict"] == want, f"emulator: {got}\nCUDA: {cuda}"


def test_the_table_was_measured_on_a_gpu_and_holds_every_case():
    assert TABLE["machine"]["gpu"] and TABLE["machine"]["torch"] and TABLE["machine"]["triton"]
    assert set(CUDA) == set(CASES), "regenerate the table on a GPU: python benchmarks/conformance.py --engine cuda"
    assert len(CASES) >= 150


def test_the_table_records_why_each_capture_failed_and_what_each_stale_replay_got_wrong():
    for name, cuda in CUDA.items():
        if cuda["verdict"] == "capture-failure":
            assert cuda.get("error") and cuda.get("message"), name
        elif cuda["verdict"] == "stale":
            assert cuda.get("differs") or cuda.get("freed"), name


def test_no_listed_exception_is_a_finding_where_cuda_replays_and_each_says_why():
    for name, limit in limits.EXCEPTIONS.items():
        assert name in CASES and limit.reason.strip(), name
        assert not (CUDA[name]["verdict"] == "replays" and limit.emulator != "replays"), name
        assert limit.emulator != CUDA[name]["verdict"], f"{name} agrees with CUDA: drop it from limits.EXCEPTIONS"


def test_the_docs_list_every_exception():
    text = DOCS.read_text()
    missing = [name for name in limits.EXCEPTIONS if f"`{name}`" not in text]
    assert not missing, f"{DOCS.name} does not list {missing}"


# -- the three mechanisms behind the issue, through a whole check --------------------------------------------


def check(name: str):
    return graphsafe.check(CASES[name].cls, engine="emulate", examples=6, database=False, seed=0)


def test_a_tensor_made_from_a_host_list_on_the_device_inside_forward_is_a_capture_failure():
    result = check("host.tensor_from_list_on_device")
    assert result.kinds == {"capture-failure"}, result.summary()


def test_repeat_interleave_without_output_size_is_a_capture_failure():
    result = check("dynamic.repeat_interleave_no_output_size")
    assert result.kinds == {"capture-failure"}, result.summary()


def test_repeat_interleave_with_output_size_gets_no_finding():
    result = check("dynamic.repeat_interleave_output_size")
    assert result.ok and not result.findings, result.summary()

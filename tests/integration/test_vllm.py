"""graphsafe's vLLM targets: on the CPU through the stand-in of vLLM's classes (each mistake gets exactly its kind,
each backend as shipped none, from the Python API, the command line and isolated), and on a GPU with vLLM
itself (skipped, with the reason, where vLLM or a GPU is missing; marked ``cuda``: run them apart from the
stand-in tests, whose CPU checks leave Triton's interpreter set-up in the process).  The H100 campaign is
benchmarks/vllm_campaign.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import graphsafe
from graphsafe import vllm as gv
from graphsafe.frontend.sandbox import Sandbox
from tests.subprocesses import OUTER_RUN_VARS, REPO, env_with_repo, plugin_args, with_path
from tests.targets.vllm_standin import EXPECTED, STANDIN

#: the capture policy under which each mistake shows (the campaign explores them all)
CAPTURE = {"vllm:TRITON_ATTN:decode_shortcut": "minimal"}
MISSING = gv.requirement()
needs_vllm = pytest.mark.skipif(MISSING is not None, reason=f"vLLM on a GPU: {MISSING}")


def check(cls, capture="worst", examples=6, engine="emulate", **kw):
    device = "cpu" if engine == "emulate" else None
    return graphsafe.check(
        cls, engine=engine, examples=examples, seed=0, database=False, capture=capture, device=device, **kw
    )


@pytest.mark.parametrize("name", gv.SAFE)
def test_a_vllm_backend_as_shipped_gets_no_finding_on_the_stand_in(name):
    result = check(STANDIN[name], capture="explore", examples=8)
    assert result.ok, result.summary()


@pytest.mark.parametrize("name", gv.BUGGY)
def test_each_mistake_in_vllms_classes_gets_exactly_its_kind_on_the_stand_in(name, no_shrinking):
    result = check(STANDIN[name], capture=CAPTURE.get(name, "worst"))
    assert result.kinds == set(EXPECTED[name]), result.summary()


def test_a_fresh_decode_block_table_is_a_stale_pointer_naming_the_metadata(no_shrinking):
    [f] = check(STANDIN["vllm:TRITON_MLA:fresh_decode_metadata"]).errors
    assert f.kind.value == "stale-pointer" and f.where == "self.metadata.decode.block_table", f.message


def test_mla_batches_are_decodes_of_one_query_length_with_speculative_tokens():
    seen = set()

    class Lengths(STANDIN["vllm:TRITON_MLA"]):
        def prepare(self, batch):
            seen.add(batch.query_lens)
            super().prepare(batch)

    assert check(Lengths, examples=10).ok
    assert seen and all(set(q) == {2} for q in seen), seen  # 1 + one speculative token, as the spec says


def test_a_stand_in_check_runs_isolated_with_the_targets_preload_in_the_fork_server():
    code = (
        "import json, graphsafe\n"
        "from graphsafe.checker import CheckOptions\n"
        "from graphsafe.frontend.options import RunOptions\n"
        "from graphsafe.frontend.sandbox import Sandbox\n"
        "box = Sandbox('tests.targets.vllm_standin:Preloading', engine='emulate')\n"
        "r = box.check(CheckOptions(engine='emulate', examples=3, seed=0, database=False), RunOptions(timeout=300))\n"
        "print(json.dumps({'ok': r.ok, 'startups': box.startups, 'inherited': box.inherited}))\n"
        "box.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_with_repo(), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["ok"] and res["startups"][-1]["method"] == "forkserver", res
    assert res["inherited"]["preloaded"] == {"graphsafe.vllm.standin.mla": ""}  # imported before the child forked


def test_graphsafe_check_runs_a_vllm_target_isolated_from_the_command_line():
    out = subprocess.run(
        [sys.executable, "-m", "graphsafe", "check", "tests.targets.vllm_standin:TritonAttention"]
        + ["--engine", "emulate", "--examples", "3", "--seed", "0", "--isolate"],
        capture_output=True,
        text=True,
        env=env_with_repo(),
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "at Support.<the builder's level>" in out.stderr  # read in the sandbox, not in this process


def test_graphsafe_list_names_the_vllm_targets_and_what_they_need():
    out = subprocess.run(
        [sys.executable, "-m", "graphsafe", "list"], capture_output=True, text=True, env=env_with_repo(), timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert all(n in out.stdout for n in gv.names()) and "the vllm:* targets (group 'vllm'" in out.stdout


def test_an_isolated_sandbox_loads_a_target_made_for_any_backend():
    cls = gv.for_backend("tests.targets.vllm_standin:UserBackend")
    box = Sandbox(cls, engine="emulate")
    try:
        assert box.ref == "graphsafe.vllm.backends:" + cls.__qualname__ and box.why_not == ""
    finally:
        box.close()


@pytest.mark.cuda
@needs_vllm
def test_vllms_triton_mla_as_shipped_gets_no_finding_on_a_gpu():
    result = check("vllm:TRITON_MLA", engine="cuda", capture="explore", examples=8)
    assert result.ok, result.summary()


@pytest.mark.cuda
@needs_vllm
@pytest.mark.parametrize(
    "name, capture",
    [
        ("vllm:TRITON_ATTN:stale_pad_slots", "worst"),
        ("vllm:TRITON_ATTN:decode_shortcut", "minimal"),
        ("vllm:TRITON_MLA:fresh_decode_metadata", "worst"),
        ("vllm:TRITON_MLA:lazy_row_plan", "worst"),
    ],
)
def test_a_mistake_in_vllms_own_classes_gets_exactly_its_kind_on_a_gpu(name, capture, no_shrinking):
    result = check(name, engine="cuda", capture=capture)
    assert result.kinds == {gv.resolve(name).expected}, result.summary()


def test_pytest_graphsafe_checks_a_vllm_target_as_an_item(pytester, monkeypatch):
    for var in OUTER_RUN_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHONPATH", with_path(REPO))
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess(
        *plugin_args(),
        "--graphsafe",
        "tests.targets.vllm_standin:TritonAttention",
        "--graphsafe-engine",
        "emulate",
        "--graphsafe-examples",
        "3",
        timeout=300,
    )
    result.assert_outcomes(passed=2)

"""graphsafe's SGLang targets: on the CPU through the stand-in of SGLang's classes (each mistake gets exactly its
kind, each backend as shipped none), and on a GPU with SGLang itself (skipped, with the reason, where SGLang or
a GPU is missing; marked ``cuda``: run them apart from the stand-in tests, whose CPU checks leave Triton's
interpreter set-up in the process).  The GPU campaign is benchmarks/sglang_campaign.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

import graphsafe
from graphsafe import sglang as gs
from graphsafe.checker import lookup
from graphsafe.frontend.sandbox import Sandbox
from tests.subprocesses import env_with_repo
from tests.targets.sglang_standin import EXPECTED, STANDIN

#: the capture policy under which each mistake shows (SGLang's own: one-token sequences, for the host shortcut;
#: a capture batch whose padded rows hold the pad slot, for the stale write locations)
CAPTURE = {"sglang:triton:stale_pad_locs": "minimal", "sglang:triton:short_seq_shortcut": "minimal"}
MISSING = gs.requirement()
needs_sglang = pytest.mark.skipif(MISSING is not None, reason=f"SGLang on a GPU: {MISSING}")


def check(cls, capture="worst", examples=6, engine="emulate", **kw):
    device = "cpu" if engine == "emulate" else None
    return graphsafe.check(
        cls, engine=engine, examples=examples, seed=0, database=False, capture=capture, device=device, **kw
    )


@pytest.mark.parametrize("name", gs.SAFE)
def test_an_sglang_backend_as_shipped_gets_no_finding_on_the_stand_in(name):
    result = check(STANDIN[name], capture="explore", examples=8)
    assert result.ok, result.summary()


@pytest.mark.parametrize("name", gs.BUGGY)
def test_each_mistake_in_sglangs_classes_gets_exactly_its_kind_on_the_stand_in(name, no_shrinking):
    result = check(STANDIN[name], capture=CAPTURE.get(name, "worst"))
    assert result.kinds == set(EXPECTED[name]), result.summary()


def test_a_fresh_kv_indptr_is_a_stale_pointer_naming_the_metadata(no_shrinking):
    [f] = check(STANDIN["sglang:triton:fresh_kv_indptr"]).errors
    assert f.kind.value == "stale-pointer" and "kv_indptr" in f.where, f.message


def test_sglang_batches_are_single_token_decodes():
    seen = set()

    class Lengths(STANDIN["sglang:triton"]):
        def prepare(self, batch):
            seen.add(batch.query_lens)
            super().prepare(batch)

    assert check(Lengths, examples=6).ok
    assert seen and all(set(q) == {1} for q in seen), seen


def test_graphsafe_list_names_the_sglang_targets_and_what_they_need():
    out = subprocess.run(
        [sys.executable, "-m", "graphsafe", "list"], capture_output=True, text=True, env=env_with_repo(), timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert all(n in out.stdout for n in gs.names()) and "the sglang:* targets (group 'sglang'" in out.stdout


def test_any_sglang_backend_by_reference_resolves_to_one_importable_class():
    cls = lookup("sglang:tests.targets.sglang_standin:UserBackend")
    assert cls is gs.for_backend("tests.targets.sglang_standin:UserBackend") and cls.backend.endswith(":UserBackend")
    box = Sandbox(cls, engine="emulate")
    try:
        assert box.ref == "graphsafe.sglang.backends:" + cls.__qualname__ and box.why_not == ""
    finally:
        box.close()


@pytest.mark.cuda
@needs_sglang
@pytest.mark.parametrize("name", gs.SAFE)
def test_sglangs_backend_as_shipped_gets_no_finding_on_a_gpu(name):
    result = check(name, engine="cuda", capture="minimal", examples=8)
    assert result.ok, result.summary()


@pytest.mark.cuda
@needs_sglang
@pytest.mark.parametrize("name", gs.BUGGY)
def test_a_mistake_in_sglangs_own_classes_gets_exactly_its_kind_on_a_gpu(name, no_shrinking):
    result = check(name, engine="cuda", capture=CAPTURE.get(name, "worst"))
    assert result.kinds == {gs.resolve(name).expected}, result.summary()

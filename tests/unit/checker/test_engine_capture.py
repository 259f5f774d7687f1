"""An engine's own backends are captured as the engine captures them, unless the check says otherwise."""

from __future__ import annotations

from graphsafe import sglang, vllm
from graphsafe.checker import CheckOptions


def names(policies) -> list[str]:
    return [p.name for p in policies]


def test_an_sglang_backend_is_captured_as_sglangs_runner_captures_by_default():
    assert names(CheckOptions().policies_for(sglang.resolve("sglang:triton"))) == ["minimal"]


def test_a_vllm_backend_is_captured_on_all_live_batches_by_default():
    assert names(CheckOptions().policies_for(vllm.resolve("vllm:TRITON_ATTN"))) == ["worst"]


def test_a_capture_the_check_names_overrides_the_engines():
    explored = CheckOptions(capture="explore").policies_for(sglang.resolve("sglang:triton"))
    assert names(explored) == ["worst", "ascending", "minimal", "drawn"]


def test_a_target_of_no_engine_explores_every_policy_by_default():
    class Plain:
        pass

    assert names(CheckOptions().policies_for(Plain)) == ["worst", "ascending", "minimal", "drawn"]

"""The vLLM adapter's logic, on the CPU stand-in of vLLM's classes: the runner's buffers after a step, the
capture path, the support level from the builder class, the registry, and what the FLEX watch records."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, ClassVar

import pytest
import torch

import graphsafe
from graphsafe import Batch, CaptureSpec, Support
from graphsafe import vllm as gv
from graphsafe.checker import lookup, validate_target
from graphsafe.checker.targets import declared_support
from graphsafe.frontend.sandbox.wire import target_ref
from graphsafe.vllm.targets import reads_of
from tests.subprocesses import env_with_repo
from tests.targets.vllm_standin import STANDIN, small

SPEC = CaptureSpec(max_reqs=4, max_query_len=4, max_seq_len=64, block_size=16)
#: two live requests (a prefill of 3 tokens and a decode) in a graph of 4 slots
BATCH = Batch(query_lens=(3, 1), seq_lens=(5, 20), block_table=((3,), (7, 2)), seed=1, num_slots=4)


class Recording:
    """Builder mixin: remembers every CommonAttentionMetadata it was given, and by which path."""

    seen: ClassVar[list[tuple[str, Any]]] = []

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        Recording.seen.append(("build", common_attn_metadata))
        return super().build(common_prefix_len, common_attn_metadata, fast_build)

    def build_for_cudagraph_capture(self, common_attn_metadata):
        Recording.seen.append(("capture", common_attn_metadata))
        return super().build_for_cudagraph_capture(common_attn_metadata)


RecordingAttention = small(gv.resolve("vllm:TRITON_ATTN"), builder_mixins=(Recording,), name="recording")


def made(cls: type = STANDIN["vllm:TRITON_ATTN"], spec: CaptureSpec = SPEC) -> Any:
    t = cls()
    t.setup(spec, torch.device("cpu"))
    return t


def test_a_step_fills_the_runners_buffers_as_vllms_runner_pads_a_graph():
    t = made()
    t.prepare(BATCH)
    assert t.query_start_loc.tolist() == [0, 3, 4, 4, 4]  # padded requests: query length 0
    assert t.seq_lens.tolist() == [5, 20, 0, 0]  # padded requests: sequence length 0
    assert t.block_table[:, :2].tolist() == [[3, 0], [7, 2], [0, 0], [0, 0]]  # padded rows: the null block
    assert t.slot_mapping[:4].tolist() == [3 * 16 + 2, 3 * 16 + 3, 3 * 16 + 4, 2 * 16 + 3]
    assert (t.slot_mapping[4:] == -1).all()  # padded token rows: no cache write
    assert t.rows == 16 and t.metadata.num_actual_tokens == 16  # 4 slots x max_query_len rows


def test_setup_builds_once_over_every_token_row_on_the_null_block_as_the_runners_dummy_runs_do():
    Recording.seen.clear()
    t = made(RecordingAttention)
    [(how, warm)] = Recording.seen
    assert how == "build" and warm.num_actual_tokens == t.max_rows == 16
    assert warm.query_start_loc_cpu.tolist() == [0, 4, 8, 12, 16]  # every row live: no padded row
    assert (warm.block_table_tensor == 0).all() and (warm.slot_mapping == -1).all()  # no cache write
    assert t.metadata is None


def test_a_builders_persistent_buffers_exist_before_the_first_step():
    t = made(STANDIN["vllm:FLEX_ATTENTION"])
    assert t.builder.persistent_kv_indices is not None  # the FLEX builder allocates them on its first build


def test_a_step_builds_with_its_own_longest_sequence_and_a_capture_with_the_models():
    t = made(RecordingAttention)
    Recording.seen.clear()
    t.prepare(BATCH)
    t.prepare_capture(BATCH)
    (how1, step), (how2, capture) = Recording.seen[0], Recording.seen[1]  # (the capture path builds after)
    assert how1 == "build" and step.max_seq_len == 20
    assert how2 == "capture" and capture.max_seq_len == SPEC.max_seq_len
    assert step.query_start_loc.untyped_storage().data_ptr() == t.query_start_loc.untyped_storage().data_ptr()


def test_the_token_inputs_past_the_live_tokens_are_zero():
    t = made()
    t.prepare(BATCH)
    assert t.q[:4].abs().sum() > 0 and (t.q[4:] == 0).all() and (t.k[4:] == 0).all()


def test_the_support_level_comes_from_the_builder_class():
    assert STANDIN["vllm:TRITON_ATTN"].support == Support.ALWAYS
    assert STANDIN["vllm:TRITON_MLA"].support == Support.UNIFORM_BATCH

    class SingleToken:
        _cudagraph_support = gv.standin.AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    cls = small(gv.resolve("vllm:TRITON_MLA"), builder_mixins=(SingleToken,), name="single")
    assert cls.support == Support.UNIFORM_SINGLE_TOKEN_DECODE


def test_validating_a_vllm_target_does_not_resolve_its_support_level():
    class Unreachable(gv.AttentionTarget):
        backend = "TRITON_ATTN"

        @classmethod
        def builder_support(cls):
            raise AssertionError("resolved in the process that only schedules the check")

    validate_target(Unreachable)
    assert getattr(declared_support(Unreachable), "resolved_when_checked", False)


def test_an_mla_graph_holds_one_uniform_query_length_per_slot():
    t = made(STANDIN["vllm:TRITON_MLA"], CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=64, uniform_query_len=2))
    assert t.query_rows == 2 and t.max_rows == 8
    assert t.config.speculative_config.num_speculative_tokens == 1  # as vLLM's runner with one draft token


def test_vllms_capture_sizes_count_the_token_rows_of_graphsafes_graphs():
    # vLLM sizes per-batch scratch (TRITON_ATTN's split-KV partials) from its capture sizes, in tokens: a graph
    # of 4 slots of 4 token rows is a capture size of 16, not 4
    t = made(STANDIN["vllm:TRITON_ATTN"], SPEC)
    assert t.query_rows == 4
    sizes = t.config.compilation_config.cudagraph_capture_sizes
    assert sorted(sizes) == sorted(s * 4 for s in SPEC.default_capture_sizes())
    assert max(sizes) == t.max_rows


def test_a_batch_its_graph_cannot_hold_is_a_contract_error():
    t = made(STANDIN["vllm:TRITON_MLA"], CaptureSpec(max_reqs=2, max_query_len=2, max_seq_len=64, uniform_query_len=2))
    with pytest.raises(graphsafe.ContractError, match="does not fit a graph"):
        t.prepare(Batch(query_lens=(3, 3), seq_lens=(5, 5), block_table=((1,), (2,))))


def test_flexs_build_returns_fresh_tensors_its_attention_does_not_read():
    t = made(STANDIN["vllm:FLEX_ATTENTION"])
    t.prepare(BATCH)
    first = t.metadata.num_blocks_per_seq  # held here, so its memory cannot be handed out again
    t.prepare(BATCH)
    assert t.metadata.num_blocks_per_seq.data_ptr() != first.data_ptr()


def test_reads_of_names_only_the_tensors_a_mask_function_uses():
    class Meta:
        def __init__(self):
            self.used, self.unused = torch.zeros(2), torch.zeros(3)

        def lookup(self, i):
            return self.used[i]

    meta, extra = Meta(), torch.ones(1)

    def mask_mod(b, h, q, kv):
        return meta.lookup(q) + extra[0]

    found = reads_of(mask_mod)
    assert any(t is meta.used for t in found) and any(t is extra for t in found)
    assert not any(t is meta.unused for t in found)


def test_a_target_for_any_backend_imports_back_under_its_name():
    cls = gv.for_backend("my_fork.attention:MyAttentionBackend")
    ref, _, why = target_ref(cls)
    assert why == "" and lookup(ref) is cls
    assert (
        cls.name == "vllm:my_fork.attention:MyAttentionBackend"
        and cls.backend == "my_fork.attention:MyAttentionBackend"
    )
    assert lookup("vllm:my_fork.attention:MyAttentionBackend") is cls
    assert issubclass(lookup("vllm-mla:FLASHMLA"), gv.MLATarget)


def test_the_vllm_group_is_every_registered_vllm_target():
    from graphsafe.checker import expand

    assert expand("vllm") == gv.names() and set(gv.SAFE) <= set(gv.names())


def test_every_mistake_has_its_safe_twin():
    assert set(gv.TWIN_OF) == set(gv.BUGGY) and set(gv.TWIN_OF.values()) <= set(gv.SAFE)
    assert len(gv.BUGGY) >= 4 and all(gv.resolve(n).expected for n in gv.BUGGY)


def test_naming_vllm_targets_imports_no_vllm():
    code = (
        "import sys, graphsafe.vllm as gv\n"
        "from graphsafe.checker import validate_target\n"
        "for n in gv.names(): validate_target(gv.resolve(n))\n"
        "print('vllm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_with_repo(), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"

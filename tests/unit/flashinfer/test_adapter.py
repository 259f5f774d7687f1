"""The FlashInfer adapter's logic, on the CPU stand-in: what ``watch`` records, the padding rule, one plan per
prepare and one run per forward, CUDA-graph mode against the default mode, and the registry."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import graphsafe
from graphsafe import Batch
from graphsafe import flashinfer as fi
from graphsafe.engines.recording import Recorder
from graphsafe.flashinfer import standin
from tests.targets.flashinfer_standin import STANDIN

BATCH = Batch(query_lens=(1, 1), seq_lens=(5, 20), block_table=((3,), (7, 2)), seed=1, num_slots=4)


def made(name: str, batch: Batch = BATCH):
    t = STANDIN[name]()
    t.setup(t.default_spec, torch.device("cpu"))
    t.prepare(batch)
    return t


def test_watch_records_the_kernel_call_of_run_with_its_buffers_and_plan_fields():
    t = made("flashinfer:decode")
    with Recorder("observe") as rec:
        t.forward()
    [launch] = [l for l in rec.launches if l.kind == "opaque"]
    assert launch.name == "flashinfer.decode.run"
    assert launch.args["paged_kv_indptr"].shape == (5,)  # the fixed buffer of the size-4 wrapper
    assert launch.args["plan_info.split_kv"] == 1 and "plan_info.padded_batch_size" in launch.args


def test_watch_puts_the_kernel_module_back():
    t = made("flashinfer:decode")
    module = t.active._cached_module
    with fi.watch(t.active) as found:
        assert found == 1 and t.active._cached_module is not module
    assert t.active._cached_module is module


def test_padded_decode_requests_get_no_pages_and_their_rows_write_the_trash_slot():
    t = made("flashinfer:decode")
    lay = t.layout(BATCH)
    assert lay.kv_indptr.tolist() == [0, 1, 3, 3, 3] and lay.last_page_len.tolist() == [5, 4, 1, 1]
    assert lay.slots.tolist()[2:] == [t.trash_slot] * 2 and lay.rows == 4
    assert lay.slots.tolist()[:2] == [3 * 16 + 4, 2 * 16 + 3]  # each new token at position seq_len - 1


def test_the_prefill_padding_request_takes_the_rows_the_live_requests_leave():
    t = made("flashinfer:prefill", Batch((3, 1), (3, 9), ((4,), (5,)), seed=2, num_slots=2))
    lay = t.layout(Batch((3, 1), (3, 9), ((4,), (5,)), seed=2, num_slots=2))
    rows = 2 * t.spec.max_query_len
    assert lay.qo_indptr.tolist() == [0, 3, 4, rows] and lay.rows == rows
    assert lay.kv_len.tolist()[-1] == rows - 4 and set(lay.kv_indices.tolist()[2:]) == {0}  # the null block


def test_each_prepare_plans_once_and_each_forward_runs_once():
    t = made("flashinfer:decode")
    t.forward()
    t.prepare(BATCH)
    t.forward()
    assert [c[0] for c in t.active.calls] == ["plan", "run", "plan", "run"]


def test_cuda_graph_mode_copies_into_the_fixed_buffers_and_the_default_mode_rebinds_them():
    graph_mode, default_mode = made("flashinfer:decode"), made("flashinfer:decode:default_mode")
    fixed = graph_mode.active._paged_kv_indptr_buf.untyped_storage().data_ptr()
    before = default_mode.active._paged_kv_indptr_buf
    graph_mode.prepare(BATCH)
    default_mode.prepare(BATCH)
    assert graph_mode.active._paged_kv_indptr_buf.untyped_storage().data_ptr() == fixed
    assert default_mode.active._paged_kv_indptr_buf is not before


def test_the_stand_in_refuses_another_batch_size_in_cuda_graph_mode_as_flashinfer_does():
    ws = torch.zeros(1 << 16, dtype=torch.uint8)
    w = standin.BatchDecodeWithPagedKVCacheWrapper(
        ws,
        "NHD",
        use_cuda_graph=True,
        paged_kv_indptr_buffer=torch.zeros(3, dtype=torch.int32),
        paged_kv_indices_buffer=torch.zeros(4, dtype=torch.int32),
        paged_kv_last_page_len_buffer=torch.zeros(2, dtype=torch.int32),
    )
    with pytest.raises(ValueError, match="batch size should be fixed"):
        w.plan(
            torch.tensor([0, 1], dtype=torch.int32),
            torch.tensor([1], dtype=torch.int32),
            torch.tensor([1], dtype=torch.int32),
            8,
            2,
            16,
            16,
        )


def test_flashinfer_targets_resolve_by_name_without_importing_flashinfer():
    code = (
        "import sys, graphsafe.checker; cls = graphsafe.checker.lookup('flashinfer:mla:mixed_batches'); "
        "print(cls.__name__, 'flashinfer' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["MLAMixedBatches", "False"]


@pytest.mark.skipif(fi.requirement() is None, reason="FlashInfer and a GPU are here: nothing is missing to report")
def test_without_flashinfer_a_flashinfer_target_is_a_contract_error_saying_what_it_needs():
    with pytest.raises(graphsafe.ContractError, match="flashinfer-python"):
        graphsafe.check("flashinfer:decode", engine="emulate", examples=1, database=False)

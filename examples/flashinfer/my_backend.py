"""Checking your own FlashInfer-based decode backend with graphsafe: override what your engine does
differently from ``graphsafe.flashinfer.Decode`` and run ``graphsafe check`` on it.

This engine (Llama-3-8B-like heads at TP1) builds one tensor-core decode wrapper per graph size in
CUDA-graph mode on slices of index buffers it allocates once, shares one workspace between the sizes, and
wants batch-invariant results, so it keeps FlashInfer from splitting the KV:

    PYTHONPATH=examples/flashinfer graphsafe check my_backend:MyDecode --engine cuda --examples 200

``MyDecodeFixedSplit`` pins the split instead, with a constant ``fixed_split_size``.  The chunk is fixed,
but whether ``plan()`` splits at all (``plan_info.split_kv``) still follows the batch: a request longer than
one chunk splits.  A graph keeps the value of its capture batch, so graphsafe reports
``frozen-host-value`` naming ``plan_info.split_kv`` (FlashInfer's docstring of ``fixed_split_size``:
"compatibility with CUDA graph is NOT guaranteed"); where the replay faults first, the check raises
``ContextBroken`` naming the example and the step.

On a machine without a GPU, set ``library = "standin"`` (FlashInfer's wrappers in plain torch) and a small
spec; ``tests/unit/flashinfer/test_my_backend.py`` does.
"""

from __future__ import annotations

from typing import Any

import graphsafe
from graphsafe.flashinfer import Decode, Layout


class MyDecode(Decode):
    """Safe: tensor-core decode, no KV split (batch-invariant), one shared workspace, vLLM's padding rule."""

    name = "mine:decode"
    num_qo_heads, num_kv_heads, head_dim = 32, 8, 128
    default_spec = graphsafe.CaptureSpec(max_reqs=16, max_query_len=1, max_seq_len=1024, block_size=16)

    def make_wrapper(self, size: int) -> Any:
        """What the engine builds per graph size: the index buffers are slices of the ones from setup()."""
        return self.lib.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace,
            "NHD",
            use_cuda_graph=True,
            use_tensor_cores=True,
            paged_kv_indptr_buffer=self.kv_indptr[: size + 1],
            paged_kv_indices_buffer=self.kv_indices,
            paged_kv_last_page_len_buffer=self.last_page_len[:size],
        )

    def split_options(self) -> dict:
        return {"disable_split_kv": True}

    def plan(self, wrapper: Any, lay: Layout) -> None:
        wrapper.plan(
            lay.kv_indptr,
            lay.kv_indices,
            lay.last_page_len,
            self.num_qo_heads,
            self.num_kv_heads,
            self.head_dim,
            self.spec.block_size,
            q_data_type=self.dtype,
            kv_data_type=self.dtype,
            **self.split_options(),
        )


class MyDecodeFixedSplit(MyDecode):
    """Unsafe under a graph: a constant split size; whether the KV splits still follows the batch."""

    name = "mine:decode:fixed_split"
    split_pages = 8  # FlashInfer's fixed_split_size, in pages

    def split_options(self) -> dict:
        return {"fixed_split_size": self.split_pages}

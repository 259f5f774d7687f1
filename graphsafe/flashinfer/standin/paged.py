"""Stand-ins of FlashInfer's paged decode and prefill wrappers and of their kernel modules.

The wrappers keep FlashInfer's buffer semantics: in CUDA-graph mode the index buffers are fixed at
construction and ``plan()`` copies into them; in the default mode ``plan()`` rebinds them to new
tensors.  ``plan()`` writes a schedule into the int workspace and keeps the plan's host values
(``_plan_info``, FlashInfer's field order) that ``run()`` passes to the kernel module: in CUDA-graph
mode the grid is fixed (``padded_batch_size``), the split decision follows FlashInfer's planners (always
split in CUDA-graph mode, unless ``fixed_split_size`` or ``disable_split_kv`` decide).
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch

from . import _kernels as K
from ._modules import MAX_GRID, DecodeModule, PagedModule

__all__ = ["BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper", "MAX_GRID"]

_INT_WORKSPACE = 1 << 16


class _Wrapper:
    """What the decode and prefill stand-ins share: workspaces, CUDA-graph or default mode, the call log."""

    # the buffers named in __init__'s ``buffers`` (``_<name>_buf``; None until plan() in default mode)
    _qo_indptr_buf: torch.Tensor | None
    _paged_kv_indptr_buf: torch.Tensor | None
    _paged_kv_indices_buf: torch.Tensor | None
    _paged_kv_last_page_len_buf: torch.Tensor | None

    def __init__(
        self,
        float_workspace_buffer: torch.Tensor,
        kv_layout: str,
        use_cuda_graph: bool,
        buffers: dict[str, torch.Tensor | None],
        batch_key: str,
    ):
        if float_workspace_buffer.device.type != "cpu":
            raise RuntimeError(
                "graphsafe's FlashInfer stand-in runs on the CPU only (its kernels read the schedule "
                "on the host); use FlashInfer itself on a GPU"
            )
        if kv_layout != "NHD":
            raise NotImplementedError("the stand-in supports kv_layout='NHD' only")
        self._float_workspace_buffer = float_workspace_buffer
        self.device = float_workspace_buffer.device
        self._int_workspace_buffer = torch.zeros(_INT_WORKSPACE, dtype=torch.uint8)
        self._pin_memory_int_workspace_buffer = torch.zeros(_INT_WORKSPACE, dtype=torch.uint8)
        self._use_cuda_graph = use_cuda_graph
        self.calls: list[tuple] = []  # ("plan", batch size, total rows) and ("run", rows) in call order
        if use_cuda_graph:
            missing = [k for k, v in buffers.items() if not torch.is_tensor(v)]
            if missing:
                raise ValueError(f"{missing[0]} should be a torch.Tensor in cudagraph mode")
            self._fixed_batch_size = len(cast(torch.Tensor, buffers[batch_key]))  # a tensor: checked above
        else:
            self._fixed_batch_size = 0
        for k, v in buffers.items():
            setattr(self, "_" + k.removesuffix("_buffer").removesuffix("_buf") + "_buf", v)
        self._plan_info = None
        self._cached_module: Any = None

    @property
    def is_cuda_graph_enabled(self) -> bool:
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer: torch.Tensor, int_workspace_buffer: torch.Tensor) -> None:
        self._float_workspace_buffer = float_workspace_buffer
        self._int_workspace_buffer = int_workspace_buffer
        self._pin_memory_int_workspace_buffer = torch.zeros(int_workspace_buffer.shape, dtype=torch.uint8)

    def _stage(self, name: str, source: torch.Tensor, prefix: bool = False) -> None:
        """CUDA-graph mode copies into the fixed buffer; the default mode rebinds it (FlashInfer's plan())."""
        attr = f"_{name}_buf"
        if self._use_cuda_graph:
            target = getattr(self, attr)
            (target[: len(source)] if prefix else target).copy_(source)
        else:
            setattr(self, attr, source.to(self.device))

    def _check_batch(self, batch_size: int) -> None:
        if self._use_cuda_graph and batch_size != self._fixed_batch_size:
            raise ValueError(
                f"The batch size should be fixed in cudagraph mode, the runtime batch size {batch_size} "
                f"mismatches the batch size set during initialization {self._fixed_batch_size}"
            )


class BatchDecodeWithPagedKVCacheWrapper(_Wrapper):
    """Stand-in of ``flashinfer.BatchDecodeWithPagedKVCacheWrapper`` (NHD, no RoPE, one query per request)."""

    def __init__(
        self,
        float_workspace_buffer,
        kv_layout="NHD",
        use_cuda_graph=False,
        use_tensor_cores=False,
        paged_kv_indptr_buffer=None,
        paged_kv_indices_buffer=None,
        paged_kv_last_page_len_buffer=None,
        backend="auto",
        jit_args=None,
    ):
        super().__init__(
            float_workspace_buffer,
            kv_layout,
            use_cuda_graph,
            {
                "paged_kv_indptr_buffer": paged_kv_indptr_buffer,
                "paged_kv_indices_buffer": paged_kv_indices_buffer,
                "paged_kv_last_page_len_buffer": paged_kv_last_page_len_buffer,
            },
            "paged_kv_last_page_len_buffer",
        )
        self._use_tensor_cores = use_tensor_cores
        if use_tensor_cores:
            self._qo_indptr_buf = torch.arange(self._fixed_batch_size + 1, dtype=torch.int32)

    def plan(
        self,
        indptr,
        indices,
        last_page_len,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        page_size,
        *,
        q_data_type="float16",
        kv_data_type=None,
        o_data_type=None,
        sm_scale=None,
        window_left=-1,
        fixed_split_size=None,
        disable_split_kv=False,
        non_blocking=True,
        **unsupported,
    ):
        if unsupported:
            raise NotImplementedError(f"the stand-in's decode plan() does not take {sorted(unsupported)}")
        batch_size = len(last_page_len)
        self._check_batch(batch_size)
        if fixed_split_size is not None and not self._use_tensor_cores:
            raise ValueError("fixed_split_size is only supported by tensor core decode for now.")
        self._stage("paged_kv_indptr", indptr)
        self._stage("paged_kv_last_page_len", last_page_len)
        self._stage("paged_kv_indices", indices, prefix=True)
        self._sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim)
        self._window_left = window_left
        ih, lh = indptr.cpu(), last_page_len.cpu()
        self.calls.append(("plan", batch_size, batch_size))
        if self._use_tensor_cores:
            if not self._use_cuda_graph:
                self._qo_indptr_buf = torch.arange(batch_size + 1, dtype=torch.int32)
            lens = torch.tensor([K.kv_len(int(ih[r + 1] - ih[r]), int(lh[r]), page_size) for r in range(batch_size)])
            self._cached_module = PagedModule()
            self._plan_info = self._cached_module.plan(
                self._float_workspace_buffer,
                self._int_workspace_buffer,
                self._pin_memory_int_workspace_buffer,
                torch.arange(batch_size + 1),
                ih,
                lens,
                batch_size,
                batch_size,
                num_qo_heads,
                num_kv_heads,
                page_size,
                self._use_cuda_graph,
                head_dim,
                head_dim,
                False,
                window_left,
                fixed_split_size or -1,
                disable_split_kv,
                0,
                0,
            )
        else:
            self._cached_module = DecodeModule()
            self._plan_info = self._cached_module.plan(
                self._float_workspace_buffer,
                self._int_workspace_buffer,
                self._pin_memory_int_workspace_buffer,
                ih,
                batch_size,
                num_qo_heads,
                num_kv_heads,
                page_size,
                self._use_cuda_graph,
                window_left,
                0.0,
                head_dim,
                head_dim,
                None,
                None,
            )

    def run(self, q, paged_kv_cache, *, out=None, lse=None, return_lse=False, enable_pdl=None, **unsupported):
        if unsupported:
            raise NotImplementedError(f"the stand-in's decode run() does not take {sorted(unsupported)}")
        k_cache, v_cache = paged_kv_cache
        out = torch.empty_like(q) if out is None else out
        self.calls.append(("run", q.shape[0]))
        if self._use_tensor_cores:
            self._cached_module.paged_run(
                self._float_workspace_buffer,
                self._int_workspace_buffer,
                self._plan_info,
                q,
                k_cache,
                v_cache,
                self._qo_indptr_buf,
                self._paged_kv_indptr_buf,
                self._paged_kv_indices_buf,
                self._paged_kv_last_page_len_buf,
                out,
                lse,
                0,
                0,
                self._window_left,
                False,
                None,
                None,
                None,
                None,
                None,
                None,
                0.0,
                self._sm_scale,
            )
        else:
            self._cached_module.run(
                self._float_workspace_buffer,
                self._int_workspace_buffer,
                self._plan_info,
                q,
                k_cache,
                v_cache,
                self._paged_kv_indptr_buf,
                self._paged_kv_indices_buf,
                self._paged_kv_last_page_len_buf,
                out,
                lse,
                0,
                self._window_left,
                False,
                None,
                0.0,
                self._sm_scale,
                1.0,
                1e4,
            )
        return out


class BatchPrefillWithPagedKVCacheWrapper(_Wrapper):
    """Stand-in of ``flashinfer.BatchPrefillWithPagedKVCacheWrapper`` (NHD, causal or not, no custom mask)."""

    def __init__(
        self,
        float_workspace_buffer,
        kv_layout="NHD",
        use_cuda_graph=False,
        qo_indptr_buf=None,
        paged_kv_indptr_buf=None,
        paged_kv_indices_buf=None,
        paged_kv_last_page_len_buf=None,
        custom_mask_buf=None,
        mask_indptr_buf=None,
        backend="auto",
        jit_args=None,
    ):
        super().__init__(
            float_workspace_buffer,
            kv_layout,
            use_cuda_graph,
            {
                "qo_indptr_buf": qo_indptr_buf,
                "paged_kv_indptr_buf": paged_kv_indptr_buf,
                "paged_kv_indices_buf": paged_kv_indices_buf,
                "paged_kv_last_page_len_buf": paged_kv_last_page_len_buf,
            },
            "paged_kv_last_page_len_buf",
        )
        self._max_total_num_rows = None

    def plan(
        self,
        qo_indptr,
        paged_kv_indptr,
        paged_kv_indices,
        paged_kv_last_page_len,
        num_qo_heads,
        num_kv_heads,
        head_dim_qk,
        page_size,
        *,
        causal=False,
        q_data_type="float16",
        kv_data_type=None,
        o_data_type=None,
        sm_scale=None,
        window_left=-1,
        fixed_split_size=None,
        disable_split_kv=False,
        non_blocking=True,
        **unsupported,
    ):
        if unsupported:
            raise NotImplementedError(f"the stand-in's prefill plan() does not take {sorted(unsupported)}")
        batch_size = len(paged_kv_last_page_len)
        self._check_batch(batch_size)
        qh, ih, lh = qo_indptr.cpu(), paged_kv_indptr.cpu(), paged_kv_last_page_len.cpu()
        total = int(qh[-1])
        if self._use_cuda_graph:
            if self._max_total_num_rows is None:
                self._max_total_num_rows = total
            elif total > self._max_total_num_rows:
                raise ValueError(
                    f"The total number of rows in qo_indptr {total} in cuda graph mode cannot exceed "
                    f"the number of rows set during initialization {self._max_total_num_rows}."
                )
        self._stage("qo_indptr", qo_indptr)
        self._stage("paged_kv_indptr", paged_kv_indptr)
        self._stage("paged_kv_last_page_len", paged_kv_last_page_len)
        self._stage("paged_kv_indices", paged_kv_indices, prefix=True)
        self._qo_indptr_last, self._causal = total, causal
        self._sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim_qk)
        self._window_left = window_left
        lens = torch.tensor([K.kv_len(int(ih[r + 1] - ih[r]), int(lh[r]), page_size) for r in range(batch_size)])
        self.calls.append(("plan", batch_size, total))
        self._cached_module = PagedModule()
        self._plan_info = self._cached_module.plan(
            self._float_workspace_buffer,
            self._int_workspace_buffer,
            self._pin_memory_int_workspace_buffer,
            qh,
            ih,
            lens,
            self._max_total_num_rows or total,
            batch_size,
            num_qo_heads,
            num_kv_heads,
            page_size,
            self._use_cuda_graph,
            head_dim_qk,
            head_dim_qk,
            causal,
            window_left,
            fixed_split_size or -1,
            disable_split_kv,
            0,
            0,
        )

    def run(self, q, paged_kv_cache, *, out=None, lse=None, return_lse=False, enable_pdl=None, **unsupported):
        if unsupported:
            raise NotImplementedError(f"the stand-in's prefill run() does not take {sorted(unsupported)}")
        if q.shape[0] != self._qo_indptr_last:
            raise ValueError(
                f"q.shape[0] ({q.shape[0]}) does not match qo_indptr[-1] ({self._qo_indptr_last}). For "
                "paged prefill, q must have shape [total_tokens, num_heads, head_dim]"
            )
        k_cache, v_cache = paged_kv_cache
        out = torch.empty_like(q) if out is None else out
        self.calls.append(("run", q.shape[0]))
        self._cached_module.paged_run(
            self._float_workspace_buffer,
            self._int_workspace_buffer,
            self._plan_info,
            q,
            k_cache,
            v_cache,
            self._qo_indptr_buf,
            self._paged_kv_indptr_buf,
            self._paged_kv_indices_buf,
            self._paged_kv_last_page_len_buf,
            out,
            lse,
            1 if self._causal else 0,
            0,
            self._window_left,
            False,
            None,
            None,
            None,
            None,
            None,
            None,
            0.0,
            self._sm_scale,
        )
        return out

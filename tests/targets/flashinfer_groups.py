"""FlashInfer decode for two layer groups (global attention, and a sliding window over each request's last
pages), written as a backend author would without ``graphsafe.flashinfer.watch`` inside ``forward()``: the
graph reader alone sees their kernels.  CUDA and FlashInfer only.

``TwoGroupsSharedIntWorkspace`` gives both groups' wrappers one int workspace and plans both in ``prepare()``:
the window group's plan overwrites the schedule the global group's kernels were captured to read there.
``TwoGroups`` gives each group its own (safe).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from graphsafe.flashinfer import Decode, Layout


class TwoGroups(Decode):
    """Safe: two decode wrappers per graph size (global and windowed layers), each with its own index buffers and
    int workspace, planned one after the other in prepare(), run one after the other in forward()."""

    name = "tests:flashinfer:two_groups"
    expected = None
    window_pages: ClassVar[int] = 2
    shared_int_workspace: ClassVar[bool] = False

    def setup(self, spec, device) -> None:
        super().setup(spec, device)
        i32 = dict(dtype=torch.int32, device=self.device)
        self.w_kv_indptr = torch.zeros(spec.max_reqs + 1, **i32)
        self.w_kv_indices = torch.zeros(self.max_pages, **i32)
        self.w_last_page_len = torch.zeros(spec.max_reqs, **i32)
        self.out_window = torch.zeros_like(self.out)

    def make_wrapper(self, size: int) -> Any:
        full = super().make_wrapper(size)
        window = self.lib.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace,
            "NHD",
            use_cuda_graph=True,
            paged_kv_indptr_buffer=self.w_kv_indptr[: size + 1],
            paged_kv_indices_buffer=self.w_kv_indices,
            paged_kv_last_page_len_buffer=self.w_last_page_len[:size],
        )
        if self.shared_int_workspace:  # BUG (in the variant): one schedule buffer for both groups
            window.reset_workspace_buffer(self.workspace, full._int_workspace_buffer)
        return full, window

    def window(self, lay: Layout) -> Layout:
        """Each request's last ``window_pages`` pages."""
        indptr, idx = [0], []
        for r in range(len(lay.kv_indptr) - 1):
            pages = lay.kv_indices[int(lay.kv_indptr[r]) : int(lay.kv_indptr[r + 1])].tolist()[-self.window_pages :]
            idx += pages
            indptr.append(indptr[-1] + len(pages))
        return self._layout(
            lay.qo_indptr.tolist(),
            indptr,
            idx,
            lay.last_page_len.tolist(),
            lay.kv_len.tolist(),
            lay.slots.tolist(),
            lay.rows,
        )

    def prepare(self, batch) -> None:
        full, window = self.wrapper_for(batch.num_slots)
        lay = self.layout(batch)
        self.write_tokens(batch, lay)
        self.plan(full, lay)
        self.plan(window, self.window(lay))
        self.active, self.rows = (full, window), lay.rows

    def forward(self):
        n = self.rows
        self.write_kv(n)
        full, window = self.active
        full.run(self.q[:n], (self.k_cache, self.v_cache), out=self.out[:n])
        window.run(self.q[:n], (self.k_cache, self.v_cache), out=self.out_window[:n])
        return self.out, self.out_window


class TwoGroupsSharedIntWorkspace(TwoGroups):
    """Buggy: both groups' wrappers share one int workspace, both planned in prepare(): the window group's plan
    overwrites the global group's schedule.  Expected: unpersisted-metadata naming the region and both plans."""

    name = "tests:flashinfer:two_groups_shared_int_workspace"
    expected = "unpersisted-metadata"
    shared_int_workspace = True

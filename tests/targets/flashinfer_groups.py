"""FlashInfer decode for two layer groups (global attention, and a sliding window over each request's last
pages), written as a backend author would without ``graphsafe.flashinfer.watch`` inside ``forward()``: the
graph reader alone sees their kernels.  CUDA and FlashInfer only.

Both plan the way a serving engine with per-group planning does: an eager step plans each group right before
its layers run (inside ``forward()``), while a graph's replay cannot plan, so ``prepare()`` plans every group before
it.  An instance is a graph's once ``prepare_capture()`` has run (the engine's graph runner; the eager reference is
another instance): from then on its ``forward()`` never plans, in the warm-up and the capture's pre-screen too,
where a plan's host copies would be taken for a synchronisation the capture cannot hold.  ``TwoGroupsSharedIntWorkspace`` gives both groups' wrappers one int workspace: eager is right (each plan is
read before the next overwrites it), but before a replay the window group's plan overwrites the schedule the
global group's kernels were captured to read there.  ``TwoGroups`` gives each group its own (safe).
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import torch

from graphsafe import capturing
from graphsafe.flashinfer import Decode, Layout, watch


class TwoGroups(Decode):
    """Safe: two decode wrappers per graph size (global and windowed layers), each with its own index buffers and
    int workspace, both planned in prepare() (for a replay), run one after the other in forward(); an eager
    forward() plans each group again right before its run."""

    name = "tests:flashinfer:two_groups"
    expected = None
    window_pages: ClassVar[int] = 2
    shared_int_workspace: ClassVar[bool] = False
    #: run under ``graphsafe.flashinfer.watch`` (the CPU stand-in needs it: its kernels read the schedule on the
    #: host, so the emulator must replay them as recorded calls); off, only the graph reader sees the kernels
    watched: ClassVar[bool] = False

    def setup(self, spec, device) -> None:
        super().setup(spec, device)
        i32 = dict(dtype=torch.int32, device=self.device)
        self.w_kv_indptr = torch.zeros(spec.max_reqs + 1, **i32)
        self.w_kv_indices = torch.zeros(self.max_pages, **i32)
        self.w_last_page_len = torch.zeros(spec.max_reqs, **i32)
        self.out_window = torch.zeros_like(self.out)
        self.graph_mode = False  # until prepare_capture(): an eager instance, which plans in forward()

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
        self.layouts = (lay, self.window(lay))
        # a replay runs no Python: plan every group now
        self.plan(full, self.layouts[0])
        self.plan(window, self.layouts[1])
        self.active, self.rows = (full, window), lay.rows

    def prepare_capture(self, batch) -> None:
        self.graph_mode = True  # this instance's forward() is captured and replayed from now on
        self.prepare(batch)

    def forward(self):
        n = self.rows
        self.write_kv(n)
        outs = (self.out, self.out_window)
        for wrapper, group, out in zip(self.active, self.layouts, outs):
            if not (self.graph_mode or capturing()):  # eager: plan the group right before its layers
                self.plan(wrapper, group)
            with watch(wrapper) if self.watched else contextlib.nullcontext():
                wrapper.run(self.q[:n], (self.k_cache, self.v_cache), out=out[:n])
        return outs


class TwoGroupsSharedIntWorkspace(TwoGroups):
    """Buggy: both groups' wrappers share one int workspace.  Eager plans each group right before its run and is
    right; before a replay prepare() plans both, and the window group's plan overwrites the global group's
    schedule.  Expected: unpersisted-metadata naming the region and both plans."""

    name = "tests:flashinfer:two_groups_shared_int_workspace"
    expected = "unpersisted-metadata"
    shared_int_workspace = True

"""A split-KV decode whose host split count follows the batch and also sizes the partials it allocates (vLLM's
Triton decode chooses ``num_kv_splits`` on the host and allocates ``attn_logits`` for it), while stage two
derives each request's split length on the device: any split count is correct, up to the order of the merge.

The frozen split count shows in a tensor shape (the partials' allocation), which an eager run cannot be given
back: the numerics-only rule needs the graph reader's proof (a capture of this batch differs only in the frozen
values and replays as eager does).  Runs on both engines; the rule takes it on CUDA with the graph reader.
"""

from __future__ import annotations

import torch

from tests.targets.hazards._common import SCALE, D, H
from tests.targets.hazards.split_kv import SplitCountFromBatchDeviceLen, _split_stage1, _split_stage2


class SplitCountSizesPartials(SplitCountFromBatchDeviceLen):
    """The split count follows the batch and sizes the partials allocated in forward(); safe up to rounding."""

    expected = None

    def forward(self):
        n, splits = self.num_slots, self.num_splits
        self.write_kv(n)
        part_acc = torch.empty(n, H, splits, D, device=self.device)  # sized by the host's split count
        part_ml = torch.empty(n, H, splits, 2, device=self.device)
        _split_stage1[(n, splits)](
            self.q,
            self.k_flat,
            self.v_flat,
            self.block_table,
            self.seq_lens,
            self.seq_lens,
            self.seq_lens,
            part_acc,
            part_ml,
            self.split_len,
            splits,
            self.block_table.stride(0),
            SCALE,
            H=H,
            D=D,
            BS=self.bs,
            MAX_SPLITS=splits,
            RANGE=1,
        )
        _split_stage2[(n,)](part_acc, part_ml, self.out, splits, H=H, D=D, MAX_SPLITS=splits)
        return self.out[:n].reshape(n, H * D)

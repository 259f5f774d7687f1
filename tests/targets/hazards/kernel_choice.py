"""A kernel chosen on the host from the batch (a Python branch the capture freezes), as vLLM's TRITON_ATTN picks
its 2D or 3D kernel: a split-KV decode for batches with long sequences, one pass for the others.

``KernelChoiceFromBatch``: both paths are right for any batch (the split length is computed per request on the
device), so a graph captured on a short batch computes a long one's result with a reduction in another order:
numerics only (info).  ``KernelChoiceTruncating``: the one-pass path covers only the keys of a short batch (a
host key count from the batch), so for a long batch it drops keys: an error.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._common import SCALE, D, H  # noqa: E402
from .split_kv import MAX_SPLITS, SplitKVDecode, _split_stage1, _split_stage2  # noqa: E402

#: batches whose longest sequence is at most this take the one-pass path
SHORT = 8


@triton.jit
def _merge_one_pass(acc_ptr, ml_ptr, out_ptr, H: tl.constexpr, D: tl.constexpr, MAX_SPLITS: tl.constexpr):
    """The one-pass path's epilogue (a kernel of its own, as a 2D kernel is): normalise the single split."""
    _split_stage2(acc_ptr, ml_ptr, out_ptr, 1, H, D, MAX_SPLITS)


class KernelChoiceFromBatch(SplitKVDecode):
    """Safe up to rounding: split-KV for long batches, one pass for short ones, chosen on the host."""

    RANGE = 1  # each request's split length from its own seq_len, on the device: any split count is right
    expected = None

    def prepare(self, batch) -> None:
        super().prepare(batch)
        self.longest = max(batch.seq_lens)  # the host value the branch reads (frozen at capture)

    def one_pass_keys(self) -> int:
        return 0  # unused by RANGE 1

    def forward(self):
        if self.longest > SHORT:
            return super().forward()
        n = self.num_slots
        self.write_kv(n)
        _split_stage1[(n, 1)](
            self.q,
            self.k_flat,
            self.v_flat,
            self.block_table,
            self.seq_lens,
            self.seq_lens,
            self.seq_lens,
            self.part_acc,
            self.part_ml,
            self.one_pass_keys(),
            1,
            self.block_table.stride(0),
            SCALE,
            H=H,
            D=D,
            BS=self.bs,
            MAX_SPLITS=MAX_SPLITS,
            RANGE=self.RANGE,
        )
        _merge_one_pass[(n,)](self.part_acc, self.part_ml, self.out, H=H, D=D, MAX_SPLITS=MAX_SPLITS)
        return self.out[:n].reshape(n, H * D)


class KernelChoiceTruncating(KernelChoiceFromBatch):
    """Buggy: the one-pass path reads only the first ``longest`` keys of each request, a host count of the capture
    batch: replayed for a longer batch it drops keys."""

    RANGE = 0  # the split length is the host scalar
    expected = "frozen-host-value"

    def one_pass_keys(self) -> int:
        return triton.cdiv(self.longest, 1)


class KernelChoiceFromPadding(KernelChoiceFromBatch):
    """Safe up to rounding: split-KV for batches of four slots, padded slots counted (vLLM 0.33's
    TRITON_ATTN picks its 2D or 3D kernel from the padded batch's shape).  Three requests padded to a graph of four
    take the split-KV kernels where the same three run eagerly in one pass: the padding changes only the order of a
    reduction (info)."""

    def prepare(self, batch) -> None:
        super().prepare(batch)
        self.longest = SHORT + 1 if batch.num_slots > 3 else 0

"""Whether a warm-up was the last to write a storage, in capture order (each capture's prepare(), then its
warm-up): storage keys are addresses, so a warm-up's write to a temporary since freed says nothing of the fresh
tensor a later prepare() made at the same address."""

from __future__ import annotations

from types import SimpleNamespace

from graphsafe.diagnosis.evidence import warmup_wrote_last
from graphsafe.engines.launches import Launch, TensorArg

KEY = 0x1000


def fill(key: int = KEY) -> Launch:
    """An aten fill_ of 16 floats at ``key``: a write of bytes [0, 64)."""
    return Launch(
        "aten", "aten::fill_", {"self": TensorArg(key, "torch.float32", (16,), (1,), 0, False)}, writes=("self",)
    )


def capture(prepared=(), warmup_launches=(), warmup_changed=()):
    return SimpleNamespace(
        prepare_written=set(prepared),
        warmup_written=set(warmup_changed),
        warmup_launches=list(warmup_launches),
        warmup_kernel_writes=set(),
    )


def test_a_warm_up_launch_that_wrote_the_region_last_counts():
    assert warmup_wrote_last([capture(prepared={KEY}, warmup_launches=[fill()])], KEY, 0, 64)


def test_a_later_prepare_at_the_same_address_ends_an_earlier_warm_ups_write():
    infos = [capture(warmup_launches=[fill()]), capture(prepared={KEY})]
    assert not warmup_wrote_last(infos, KEY, 0, 64)


def test_a_warm_up_after_the_last_prepare_counts_again():
    infos = [capture(prepared={KEY}), capture(warmup_changed={KEY})]
    assert warmup_wrote_last(infos, KEY, 0, 64)


def test_a_warm_up_write_elsewhere_in_the_storage_does_not_count():
    assert not warmup_wrote_last([capture(warmup_launches=[fill()])], KEY, 64, 128)

"""Seeded values: fill_seeded (static tensors, filled on their device) gives the same values whatever
the device, chunking, layout or size path, and small tensors keep seeded()'s values."""

import pytest
import torch

from graphsafe.values import SEEDED_POOL, derive_seed, fill_seeded, seeded, seeded_pieces

from ...conftest import needs_cuda


def reference(numel: int, seed: int, i: torch.Tensor) -> torch.Tensor:
    """The documented formula at flat indices ``i``, by index arithmetic (on the CPU)."""
    p = min(max(SEEDED_POOL, 1 << ((numel // 16).bit_length() - 1)), SEEDED_POOL * 64)
    half = 0.5**0.5
    a = seeded((p,), seed=derive_seed(seed, "a"), scale=half)
    b = seeded((p - 1,), seed=derive_seed(seed, "b"), scale=half)
    return a[(i + derive_seed(seed, "oa") % p) % p] + b[(i + derive_seed(seed, "ob") % (p - 1)) % (p - 1)]


def test_a_small_tensor_gets_exactly_seeded_values():
    t = torch.empty(3, 5, 7, dtype=torch.bfloat16)
    assert torch.equal(fill_seeded(t, 11), seeded((3, 5, 7), seed=11, dtype=torch.bfloat16))


def test_a_large_tensor_follows_the_formula_in_any_chunking():
    numel = SEEDED_POOL * 3 + 17
    ref = reference(numel, 7, torch.arange(numel))
    assert torch.equal(fill_seeded(torch.empty(numel), 7), ref)
    pieces = torch.cat([v for _, v in seeded_pieces(numel, 7, "cpu", chunk=100_003)])
    assert torch.equal(pieces, ref)
    tail = torch.cat([v for _, v in seeded_pieces(numel, 7, "cpu", start=numel - 1000)])
    assert torch.equal(tail, ref[-1000:])
    assert abs(float(ref.mean())) < 0.01 and abs(float(ref.std()) - 1.0) < 0.01


def test_a_larger_tensor_uses_longer_pools():
    numel = SEEDED_POOL * 64 + 5  # pools of 4 * SEEDED_POOL
    t = fill_seeded(torch.empty(numel), 7)
    at = torch.cat(
        [
            torch.arange(1000),
            torch.arange(SEEDED_POOL * 4 - 500, SEEDED_POOL * 4 + 500),
            torch.arange(numel - 1000, numel),
        ]
    )
    assert torch.equal(t[at], reference(numel, 7, at))


def test_dtype_layout_and_seed():
    rows, cols = 4000, 130  # > SEEDED_POOL elements
    full = fill_seeded(torch.empty(rows, cols), 3)
    assert torch.equal(fill_seeded(torch.empty(rows, cols, dtype=torch.float16), 3), full.half())
    strided = torch.empty(rows, 2 * cols)[:, ::2]  # not contiguous: written row by row
    assert torch.equal(fill_seeded(strided, 3), full)
    assert not torch.equal(fill_seeded(torch.empty(rows, cols), 4), full)
    with pytest.raises(TypeError, match="floating"):
        fill_seeded(torch.empty(4, dtype=torch.int32), 3)


@needs_cuda
@pytest.mark.parametrize("numel", [1000, SEEDED_POOL * 3 + 17, SEEDED_POOL * 64 + 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn])
def test_the_gpu_fills_the_same_values_as_the_cpu(numel, dtype):
    cpu = fill_seeded(torch.empty(numel, dtype=dtype), 9)
    gpu = fill_seeded(torch.empty(numel, dtype=dtype, device="cuda"), 9)
    assert torch.equal(gpu.cpu().view(torch.uint8), cpu.view(torch.uint8))

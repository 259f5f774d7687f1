"""Seeded values: the same seed gives the same numbers on CPU and GPU."""

from __future__ import annotations

import hashlib
from typing import Sequence

import torch

__all__ = ["seeded", "derive_seed"]


def derive_seed(seed: int, *names: object) -> int:
    """A stable 63-bit seed from ``seed`` and names (paths, step indices)."""
    h = hashlib.blake2b(repr((seed,) + names).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def seeded(
    shape: Sequence[int] | int,
    *,
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    scale: float = 1.0,
    low: int = 0,
    high: int = 100,
) -> torch.Tensor:
    """A tensor of pseudo-random values fixed by ``seed``, identical on every device.

    Values are drawn on the CPU with a dedicated generator and then moved, so a
    CUDA run and the CPU emulator see the same numbers.  Floating dtypes
    (fp8 included) get ``scale * N(0, 1)`` rounded to ``dtype``; integer dtypes
    get integers in ``[low, high)``.

    Example::

        q = graphsafe.seeded((4, 64), seed=7, dtype=torch.bfloat16, device="cuda")
    """
    if isinstance(shape, int):
        shape = (shape,)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed) & ((1 << 63) - 1))
    if dtype.is_floating_point:
        t = torch.randn(tuple(shape), generator=gen, dtype=torch.float32) * scale
    elif dtype == torch.bool:
        t = torch.randint(0, 2, tuple(shape), generator=gen).bool()
    else:
        t = torch.randint(low, high, tuple(shape), generator=gen, dtype=torch.int64)
    return t.to(dtype=dtype).to(device)

"""Seeded values: the same seed gives the same numbers on CPU and GPU."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence

import torch

__all__ = ["seeded", "derive_seed", "fill_seeded", "seeded_pieces", "SEEDED_POOL"]

#: tensors of up to this many elements get :func:`seeded`'s values; larger ones are built from two pools
SEEDED_POOL = 1 << 18


def _pool_size(numel: int) -> int:
    """The first pool's length for a tensor of ``numel`` elements: the largest power of two up to
    ``numel / 16``, within ``[SEEDED_POOL, 64 * SEEDED_POOL]`` (few, long additions; pools at most
    1/8 of the tensor beyond the smallest)."""
    return min(max(SEEDED_POOL, 1 << max(0, (numel // 16).bit_length() - 1)), SEEDED_POOL * 64)


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
        t = torch.randn(tuple(shape), generator=gen, dtype=torch.float32)
        if scale != 1.0:
            t.mul_(scale)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, tuple(shape), generator=gen).bool()
    else:
        t = torch.randint(low, high, tuple(shape), generator=gen, dtype=torch.int64)
    return t.to(dtype=dtype).to(device)


class _Pools:
    """The two seeded pools and offsets behind :func:`fill_seeded` for large tensors (see :func:`seeded_pieces`)."""

    def __init__(self, numel: int, seed: int, device: torch.device | str):
        p = _pool_size(numel)
        q, half = p - 1, math.sqrt(0.5)
        self.a = seeded((p,), seed=derive_seed(seed, "a"), scale=half, device=device)
        self.b = seeded((q,), seed=derive_seed(seed, "b"), scale=half, device=device)
        self.oa, self.ob = derive_seed(seed, "oa") % p, derive_seed(seed, "ob") % q

    def into(self, out: torch.Tensor, start: int) -> None:
        """``out`` (flat float32) := the values of elements ``start .. start + out.numel() - 1``: one
        addition per run where both pools are contiguous, written straight into ``out``."""
        p, q = self.a.numel(), self.b.numel()
        k, n, i, j = 0, out.numel(), (start + self.oa) % p, (start + self.ob) % q
        while k < n:
            m = min(n - k, p - i, q - j)
            torch.add(self.a[i : i + m], self.b[j : j + m], out=out[k : k + m])
            k, i, j = k + m, (i + m) % p, (j + m) % q


def seeded_pieces(
    numel: int,
    seed: int,
    device: torch.device | str,
    *,
    start: int = 0,
    stop: int | None = None,
    chunk: int = SEEDED_POOL,
) -> Iterator[tuple[int, torch.Tensor]]:
    """``(offset, values)`` pieces of the flat float32 values :func:`fill_seeded` gives a tensor of
    ``numel > SEEDED_POOL`` elements, for the flat range ``[start, stop)``, at most ``chunk`` at a time.

    Element ``i`` is ``a[(i + oa) % P] + b[(i + ob) % (P - 1)]``: ``a`` and ``b`` are :func:`seeded`
    pools of ``P`` and ``P - 1`` values of variance 1/2 (so the sum is close to N(0, 1)), ``oa`` and
    ``ob`` offsets derived from ``seed``; ``P`` grows with the tensor (2**18 to 2**24, at most 1/16
    of it beyond the smallest).  The periods are coprime: the pattern repeats after 2**36 elements
    or more.  The device does one float32 addition per element (correctly rounded everywhere), so
    the values are bitwise the same on CPU and GPU, and the same whatever ``chunk`` is.  Temporary
    memory: the two pools and one piece.
    """
    pools = _Pools(numel, seed, device)
    stop = numel if stop is None else stop
    for s in range(start, stop, chunk):
        out = torch.empty(min(chunk, stop - s), dtype=torch.float32, device=device)
        pools.into(out, s)
        yield s, out


def fill_seeded(t: torch.Tensor, seed: int) -> torch.Tensor:
    """Fill the floating tensor ``t`` in place, on its device, with values fixed by ``seed``; returns ``t``.

    The same values on every device, like :func:`seeded`: up to ``SEEDED_POOL`` elements exactly
    ``seeded(t.shape, seed=seed, dtype=t.dtype)``; beyond, the values of :func:`seeded_pieces` in
    row-major order, rounded to ``t``'s dtype.  Built piece by piece on ``t``'s device (a contiguous
    float32 tensor in place), so filling a multi-GB KV cache needs no host copy and no second
    full-size buffer.

    Example::

        cache = torch.empty(4096, 16, 8, 128, dtype=torch.bfloat16, device="cuda")
        graphsafe.values.fill_seeded(cache, seed=7)   # equal to the same call on a CPU tensor
    """
    if not t.dtype.is_floating_point:
        raise TypeError(f"fill_seeded fills floating tensors, not {t.dtype}")
    n = t.numel()
    if n <= SEEDED_POOL:  # copied from the CPU straight into ``t``: no temporary on its device
        return t.copy_(seeded(tuple(t.shape), seed=seed, dtype=t.dtype))
    if t.dtype == torch.float32 and t.is_contiguous():
        _Pools(n, seed, t.device).into(t.view(-1), 0)
        return t
    rows = t.view(-1) if t.is_contiguous() else t  # a non-contiguous tensor is written whole rows at a time
    row = rows[0].numel()
    per = max(1, SEEDED_POOL // row) * row
    for s, values in seeded_pieces(n, seed, t.device, chunk=per):
        r = s // row
        rows[r : r + values.numel() // row].copy_(values.view((-1,) + tuple(rows.shape[1:])))
    return t

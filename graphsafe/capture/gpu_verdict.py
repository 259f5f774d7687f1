"""Closeness verdicts on a GPU in one Triton launch per pair.

The per-step comparison is host-bound: ``torch.isclose(g, e).all()`` is a dozen small kernels (each
one a few microseconds of host time to launch), a verdict per step and pair.  :func:`count_bad` does
the same test in one launch per pair: each program loads a block of both sides, tests it, and adds
its count of elements that are not close into the pair's slot; the caller reads every slot at once.

The test is :func:`graphsafe.capture.compare`'s, element for element: integers and booleans exactly;
floats compared in float32 (every narrower float converts exactly) as equal, or both NaN, or (unless
bitwise) ``|g - e| <= atol + rtol * |e|`` with a finite difference, what ``torch.isclose(...,
equal_nan=True)`` tests.  Floating-point contraction is off (``atol + rtol * |e|`` rounded as torch
rounds it).  Only for CUDA tensors of one dtype, with the interpreter off; anything else is the
caller's to compare with torch (:func:`usable`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..engines.triton_env import interpreter_active

__all__ = ["usable", "count_bad"]

_BLOCK = 1024
_kernel = None  # the Triton kernel, defined at first use: importing graphsafe defines no kernel
_unavailable = False  # Triton could not be imported: torch compares instead


def _define():
    # imported at first use: a check on the CPU emulator never needs this kernel, and TRITON_INTERPRET
    # must be decided before triton's first import
    import triton
    import triton.language as tl

    @triton.jit
    def _count_bad(g_ptr, e_ptr, out_ptr, slot, n, rtol, atol, MODE: tl.constexpr, BLOCK: tl.constexpr):
        # MODE 0: exact (integers, booleans); 1: floats bitwise (NaN equals NaN); 2: floats close
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        g = tl.load(g_ptr + offs, mask=inside)  # lanes outside are not counted (no ``other``: fp8 has no literal)
        e = tl.load(e_ptr + offs, mask=inside)
        if MODE == 0:
            ok = g == e
        else:
            gf = g.to(tl.float32)
            ef = e.to(tl.float32)
            ok = (gf == ef) | ((gf != gf) & (ef != ef))
            if MODE == 2:
                d = tl.abs(gf - ef)
                ok = ok | ((d <= atol + rtol * tl.abs(ef)) & (d < float("inf")))
        bad = tl.where(inside & (ok == 0), 1, 0)
        tl.atomic_add(out_ptr + slot, tl.sum(bad, axis=0).to(tl.int64))

    return _count_bad


def usable(g: torch.Tensor, e: torch.Tensor) -> bool:
    """Can :func:`count_bad` compare this pair (both on one CUDA device, one dtype, Triton compiled)?"""
    global _unavailable
    if _unavailable or not g.is_cuda or g.device != e.device or g.dtype != e.dtype or g.is_complex():
        return False
    if interpreter_active():
        return False
    if _kernel is None:
        try:
            _load()
        except ImportError:
            _unavailable = True
            return False
    return True


def _load() -> None:
    global _kernel
    if _kernel is None:
        _kernel = _define()


def count_bad(pairs: Sequence[tuple[torch.Tensor, torch.Tensor, float, float, bool]]) -> torch.Tensor:
    """For ``(graph, eager, rtol, atol, bitwise)`` pairs of equal shapes (each :func:`usable`): a device
    tensor of int64 counts, one per pair, of the elements that are not close.  Nothing read back."""
    _load()
    out = torch.zeros(len(pairs), dtype=torch.int64, device=pairs[0][0].device)
    for i, (g, e, rtol, atol, bitwise) in enumerate(pairs):
        n = g.numel()
        if n == 0:
            continue
        g, e = g.reshape(-1), e.reshape(-1)
        if g.dtype == torch.bool:  # compared as bytes
            g, e = g.view(torch.uint8), e.view(torch.uint8)
        mode = 0 if not g.dtype.is_floating_point else 1 if bitwise else 2
        _kernel[(-(-n // _BLOCK),)](g, e, out, i, n, float(rtol), float(atol), MODE=mode, BLOCK=_BLOCK,
                                    enable_fp_fusion=False)
    return out

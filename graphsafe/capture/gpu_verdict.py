"""Closeness verdicts on a GPU: one Triton launch for a step's pairs.

The per-step comparison is host-bound: ``torch.isclose(g, e).all()`` is a dozen small kernels (each
one a few microseconds of host time to launch), a verdict per step and pair.  :func:`count_bad` does
the same test in one launch for up to :data:`GROUP` pairs (a Triton launch costs host time, more the more
arguments it has, so there is one kernel per number of places, 1, 2 or 4; ``benchmarks/throughput.py``
measures the per-step path): each
program loads a block of one pair's sides, tests it, and adds its count of elements that are not close
into the pair's slot; the caller reads every slot at once.

The test is :func:`graphsafe.capture.compare`'s, element for element: integers and booleans exactly;
floats compared in float32 (every narrower float converts exactly) as equal, or both NaN, or (unless
bitwise) ``|g - e| <= atol + rtol * |e|`` with a finite difference, what ``torch.isclose(...,
equal_nan=True)`` tests.  Floating-point contraction is off (``atol + rtol * |e|`` rounded as torch
rounds it).  Only for CUDA tensors of one dtype, with the interpreter off; anything else is the
caller's to compare with torch (:func:`usable`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..engines.triton_env import interpreter_active

__all__ = ["usable", "count_bad"]

_BLOCK = 1024
_kernels: dict | None = None  # places -> Triton kernel, defined at first use: importing graphsafe defines no kernel
_unavailable = False  # Triton could not be imported: torch compares instead


#: pairs counted by one launch (a step compares an output or two and its static tensors)
GROUP = 4
_MODES = tuple(f"M{i}" for i in range(GROUP))  # the kernels' mode arguments, by place


def usable(g: torch.Tensor, e: torch.Tensor) -> bool:
    """Can :func:`count_bad` compare this pair (both on one CUDA device, one dtype, Triton compiled)?"""
    global _unavailable
    if _unavailable or not g.is_cuda or g.device != e.device or g.dtype != e.dtype or g.is_complex():
        return False
    if interpreter_active():
        return False
    if _kernels is None:
        try:
            _load()
        except ImportError:
            _unavailable = True
            return False
    return True


def _load() -> dict:
    global _kernels
    if _kernels is None:
        from ._verdict_kernel import KERNELS  # at first use: a check on the CPU emulator never needs it

        _kernels = KERNELS
    return _kernels


def count_bad(pairs: Sequence[tuple[torch.Tensor, torch.Tensor, float, float, bool]]) -> torch.Tensor:
    """For ``(graph, eager, rtol, atol, bitwise)`` pairs of equal shapes (each :func:`usable`): a device
    tensor of int64 counts, one per pair, of the elements that are not close.  One launch per
    :data:`GROUP` pairs; nothing read back."""
    kernels = _load()
    out = torch.zeros(len(pairs), dtype=torch.int64, device=pairs[0][0].device)
    for base in range(0, len(pairs), GROUP):
        args: list = []
        modes: list[int] = []
        longest = 0
        for g, e, rtol, atol, bitwise in pairs[base : base + GROUP]:
            n = g.numel()
            if not (g.is_contiguous() and e.is_contiguous()):  # the kernel reads flat memory
                g, e = g.reshape(-1), e.reshape(-1)
            if g.dtype == torch.bool:  # compared as bytes
                g, e = g.view(torch.uint8), e.view(torch.uint8)
            args += [g, e, n, float(rtol), float(atol)]
            modes.append(-1 if n == 0 else 0 if not g.dtype.is_floating_point else 1 if bitwise else 2)
            longest = max(longest, n)
        if longest == 0:
            continue
        places = next(k for k in sorted(kernels) if k >= len(modes))
        while len(modes) < places:  # the places left empty: any tensor, never read
            args += [out, out, 0, 0.0, 0.0]
            modes.append(-1)
        kernels[places][(-(-longest // _BLOCK), places)](
            out[base:] if base else out, *args, **dict(zip(_MODES, modes)), BLOCK=_BLOCK, enable_fp_fusion=False
        )
    return out

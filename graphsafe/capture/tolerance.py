"""How close graph and eager must be: a check's :class:`Tolerance` and the default tolerances per dtype."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Tolerance", "tolerances", "reorder_tolerances"]


@dataclass(frozen=True)
class Tolerance:
    """How close graph and eager must be: ``rtol``/``atol`` (None: ``torch.testing.assert_close``'s
    default for the dtype), or ``bitwise`` equality (NaN equals NaN).

    Example::

        graphsafe.check(MyBackend, tolerance=graphsafe.Tolerance(bitwise=True))
    """

    rtol: float | None = None
    atol: float | None = None
    bitwise: bool = False

    @property
    def is_default(self) -> bool:
        return self == Tolerance()


# (rtol, atol) per dtype, as torch.testing.assert_close uses by default.
_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}

# (rtol, atol) per dtype that a reordered reduction (another split count, another block order) stays within
_REORDER = {
    torch.float64: (1e-6, 1e-7),
    torch.float32: (2e-4, 2e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
}


def reorder_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """How far a reordered reduction may move a result of ``dtype``: wider than the default tolerance."""
    return _REORDER.get(dtype, (5e-2, 1e-2) if dtype.is_floating_point else (0.0, 0.0))


def tolerances(dtype: torch.dtype, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """Default (rtol, atol) for ``dtype``; fp8 and other narrow floats compare with bf16's."""
    r, a = _TOL.get(dtype, (1.6e-2, 1e-5) if dtype.is_floating_point else (0.0, 0.0))
    return (r if rtol is None else rtol, a if atol is None else atol)

"""What vLLM's classes take, release by release: the keyword arguments a constructor accepts."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["kwargs_for"]


def kwargs_for(cls: type, **given: Any) -> dict[str, Any]:
    """The keyword arguments among ``given`` that ``cls`` takes (its constructor's parameters: dataclass fields
    and init-only ones differ between vLLM releases)."""
    names = set(inspect.signature(cls).parameters)
    return {k: v for k, v in given.items() if k in names}

"""What the CPU emulator keeps to re-execute a recorded launch: references to external memory that
re-materialise as tensors at replay, whatever the Python objects that held them became."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ExternalRef", "materialise"]


class ExternalRef:
    """A view of a storage the graph did not allocate, by the storage itself: :meth:`get` rebuilds the
    tensor at replay, so the replay reads whatever that memory holds then."""

    __slots__ = ("storage", "dtype", "offset", "shape", "stride", "device")

    def __init__(self, storage, dtype, offset, shape, stride, device):
        self.storage, self.dtype, self.offset, self.shape, self.stride, self.device = (
            storage,
            dtype,
            offset,
            shape,
            stride,
            device,
        )

    def get(self) -> torch.Tensor:
        return torch.empty(0, dtype=self.dtype, device=self.device).set_(
            self.storage, self.offset, self.shape, self.stride
        )


def materialise(v: Any) -> Any:
    """``v`` with every :class:`ExternalRef` inside it (dicts, lists, tuples) rebuilt as a tensor."""
    if isinstance(v, ExternalRef):
        return v.get()
    if isinstance(v, dict):
        return {k: materialise(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
        return type(v)(materialise(x) for x in v)
    return v

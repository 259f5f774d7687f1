"""What a recorder writes down about one launch: tensor arguments as the graph sees them, frozen host
values, the memory a graph reads that it did not allocate, and the overrides an observing recorder
applies.  Plain data, shared by the recorder, the probes and the guard."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = ["TensorArg", "Launch", "ExternalBuffer", "Override", "freeze"]


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument as the graph sees it: a pointer plus a layout."""

    key: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    internal: bool

    def short(self) -> str:
        return f"Tensor{list(self.shape)}:{self.dtype.replace('torch.', '')}"


@dataclass
class Launch:
    """One recorded launch: an aten op, a Triton kernel or an opaque call (:func:`opaque_call`)."""

    kind: str  # "aten", "triton" or "opaque"
    name: str
    args: dict[str, Any]  # name -> TensorArg or frozen host value
    grid: tuple | None = None
    where: str = ""
    writes: tuple[str, ...] = ()  # argument names written (aten schema)
    device_work: bool = True  # False for views and bookkeeping ops (no kernel runs on the device)


@dataclass
class ExternalBuffer:
    """Memory the graph reads that was not allocated by the graph itself."""

    key: int
    nbytes: int
    device: str
    dtype: str
    address: int
    weak: Any = None  # StorageWeakRef
    handle: Any = None  # strong UntypedStorage (emulator only)
    first_use: str = ""
    kernels: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)  # where the captured graph's nodes point into it (graph reader)
    #: found only by the graph reader: an address in a kernel's parameters, which says neither that the kernel
    #: reads it in this configuration nor whether it writes it (checked for liveness, not read by the ledger)
    graph_only: bool = False

    @classmethod
    def of(cls, t: torch.Tensor, key: int, first_use: str, *, strong: bool = False, graph_only: bool = False):
        """The buffer of ``t``'s storage (``key``: its address), held weakly, and strongly too when ``strong``
        (the emulator keeps what its graphs read alive as a CUDA graph's pool would not)."""
        s = t.untyped_storage()
        return cls(
            key=key,
            nbytes=s.nbytes(),
            device=str(t.device),
            dtype=str(t.dtype),
            address=key,
            weak=StorageWeakRef(s),
            handle=s if strong else None,
            first_use=first_use,
            graph_only=graph_only,
        )

    def alive(self) -> bool:
        """Does anything besides the graph still hold this memory?"""
        if self.handle is not None:
            return torch._C._storage_Use_Count(self.handle._cdata) > 1
        return not self.weak.expired()


def freeze(v: Any) -> Any:
    """A comparable, printable form of a host value (a sequence of an extension's own type, such as a
    TVM-FFI array of plan values, becomes a tuple like a list)."""
    if isinstance(v, (int, float, bool, str)) or v is None:
        return v
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return tuple(freeze(x) for x in v)
    if hasattr(v, "value") and type(v).__name__ == "constexpr":
        return freeze(v.value)
    if hasattr(v, "__len__") and hasattr(v, "__getitem__") and not isinstance(v, (bytes, dict, torch.Tensor)):
        try:
            return tuple(freeze(v[i]) for i in range(len(v)))
        except Exception:  # noqa: BLE001 - not an indexable sequence after all: its repr stands for it
            pass
    return repr(v)


@dataclass(frozen=True)
class Override:
    """Run the ``occurrence``-th launch of Triton kernel ``kernel`` (0-based, in launch order) with
    argument ``argument`` (``"grid"`` for the grid) set to ``value``: what a capture froze."""

    kernel: str
    occurrence: int
    argument: str
    value: Any

"""Host or device memory, for the emulator, and the host/device crossings a CUDA capture refuses.

On a GPU a tensor's device says whether it is host or device memory.  On the CPU emulator every tensor
is a CPU tensor, so :class:`HostMemory` learns it from how each tensor was made, watching (a
``TorchFunctionMode``) while graphsafe runs the target's ``setup()``, the capture's ``prepare()``,
warm-up and capture:

* **host**: made by a factory given no device (``torch.zeros(n)``, ``torch.tensor(list)``), given the
  device as the string ``"cpu"``, or given ``pin_memory`` at all (a CPU-only torch cannot pin, so code
  that pins on a GPU passes ``pin_memory=is_pin_memory_available()``, False here); by ``.cpu()``,
  ``.to("cpu")``, ``torch.from_numpy``; by an op whose tensors are all host memory; the value torch wraps
  a Python scalar in (``x[i] = 0.0``);
* **pinned** host memory: made with ``pin_memory`` (any value);
* **device**: everything else, a device given as a ``torch.device`` (the one ``setup()`` receives) above all.
  ``.to(device)`` of host memory is a copy here as on a GPU.

During a capture the watch also refuses what CUDA refuses at that boundary (measured per op,
``benchmarks/results/conformance-cuda-gpu.json``): ``torch.tensor``/``as_tensor``/``new_tensor`` of host
data onto the device, and ``.to(device)`` of pageable host memory (a copy from pageable memory);
``.cpu()``, ``.tolist()`` and ``.numpy()`` of device memory, and ``.to("cpu")`` without ``non_blocking``
(a copy that waits); ``one_hot`` without ``num_classes`` (the class count is read back).  ``one_hot``
with ``num_classes`` runs as CUDA's does, without the range check the CPU kernel reads back.
The aten-level rules (``.item()``, ``nonzero``, ``copy_`` between host and device, private generators)
are :mod:`graphsafe.engines.capture_rules`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode

from ..errors import CaptureError
from . import triton_env
from .hooks import active
from .userframe import user_frame

__all__ = ["HostMemory", "PAGEABLE", "BLOCKING"]

PAGEABLE = (
    "{op} at {where} copies between host and device memory inside the capture from pageable host memory; a CUDA "
    "graph copies only from pinned host memory (torch refuses: 'Cannot copy between CPU and CUDA tensors during CUDA "
    "graph capture unless the CPU tensor is pinned'): make the tensor in setup() or prepare(), or stage it in a "
    "pinned buffer and copy with non_blocking=True"
)
BLOCKING = (
    "{op} at {where} is a blocking copy between pinned host memory and the device: it waits for the device, which a "
    "capture cannot; pass non_blocking=True"
)


def _tensors(v: Any) -> Iterator[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _tensors(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _tensors(x)


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class HostMemory:
    """Which tensors are host memory (see the module's docstring) for an engine on ``device``."""

    def __init__(self, device: torch.device):
        self.emulated = torch.device(device).type == "cpu"  # else a tensor's own device says it
        self._tags: dict[int, tuple[StorageWeakRef, bool, bool]] = {}  # storage -> (ref, pinned, wrapped)

    # -- what a tensor is ------------------------------------------------------------------------------
    def _entry(self, t: torch.Tensor) -> tuple[StorageWeakRef, bool, bool] | None:
        s = t.untyped_storage()
        e = self._tags.get(s.data_ptr())
        if e is None or e[0].cdata != s._cdata or e[0].expired():
            return None
        return e

    def is_host(self, t: torch.Tensor) -> bool:
        if not self.emulated:
            return t.device.type == "cpu"
        return self._entry(t) is not None

    def pinned(self, t: torch.Tensor) -> bool:
        if not self.emulated:
            return t.device.type == "cpu" and t.is_pinned()
        e = self._entry(t)
        return e is not None and e[1]

    def wrapped(self, t: torch.Tensor) -> bool:
        """A Python scalar torch wrapped in a 0-dim host tensor (``x[i] = 0.0``), not a tensor of the target's."""
        if not self.emulated:
            return t.device.type == "cpu" and t.dim() == 0 and self._entry(t) is None
        e = self._entry(t)
        return e is not None and e[2]

    def mark(self, t: torch.Tensor, *, pinned: bool = False, wrapped: bool = False) -> None:
        """Note ``t``'s storage as host memory (the CPU emulator only: elsewhere its device says so)."""
        if not self.emulated:
            return
        s = t.untyped_storage()
        if s.data_ptr() != 0 and self._entry(t) is None:
            self._tags[s.data_ptr()] = (StorageWeakRef(s), pinned, wrapped)

    # -- watching ----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def watching(self, capturing: bool = False) -> Iterator[None]:
        """Learn what the target makes on the host; with ``capturing``, also refuse what a capture cannot hold."""
        if not self.emulated and not capturing:
            yield
            return
        self._tags = {k: e for k, e in self._tags.items() if not e[0].expired()}
        from_numpy = torch.from_numpy  # not overridable by a mode: wrapped while watching

        def host_from_numpy(a):
            t = from_numpy(a)
            self.mark(t)
            return t

        if self.emulated:
            torch.from_numpy = host_from_numpy
        try:
            with _Watch(self, capturing):
                yield
        finally:
            torch.from_numpy = from_numpy

    # -- where a result lives ----------------------------------------------------------------------------
    def names_host(self, device: Any) -> bool:
        """Does a ``device`` argument (or a tensor ``.to()`` is given) name host memory?  On the emulator only
        the string "cpu" does."""
        if isinstance(device, torch.Tensor):
            return self.is_host(device)
        if self.emulated:
            return isinstance(device, str) and device.split(":")[0] == "cpu"
        return torch.device(device).type == "cpu"

    def _classify(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        ins = list(_tensors(args)) + list(_tensors(kwargs))
        in_keys = {_key(t) for t in ins}
        for t in _tensors(out):
            if _key(t) in in_keys:
                continue
            e = self._entry(t)
            if e is not None and not (func in _DATA and e[2]):
                continue
            if e is not None:  # torch.tensor's own data, seen first as a wrapped scalar by the recorder
                del self._tags[_key(t)]
            if "pin_memory" in kwargs:
                self.mark(t, pinned=True)
            elif kwargs.get("device") is not None:
                if self.names_host(kwargs["device"]):
                    self.mark(t)
            elif func is torch.Tensor.cpu or (ins and all(self.is_host(x) for x in ins)):
                self.mark(t)
            elif not ins and torch.get_default_device().type == "cpu":
                self.mark(t)


#: factories of a tensor from host data (Python numbers, lists, arrays)
_DATA = (torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor)


def _target(args: tuple, kwargs: dict) -> tuple[Any, bool]:
    """The device a ``Tensor.to`` call names (None if none) and its ``non_blocking``."""
    device = kwargs.get("device")
    non_blocking = bool(kwargs.get("non_blocking", False))
    for a in args[1:]:
        if isinstance(a, (str, torch.device)) and device is None:
            device = a
        elif isinstance(a, torch.Tensor) and device is None:
            device = a  # .to(other): where other is
        elif isinstance(a, bool):
            non_blocking = a
            break
    return device, non_blocking


class _Watch(TorchFunctionMode):
    def __init__(self, mem: HostMemory, capturing: bool):
        super().__init__()
        self.mem, self.capturing = mem, capturing

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        rec = active()
        if (rec is not None and rec.suspended) or triton_env.autotune_benchmarking():
            return func(*args, **kwargs)  # inside an opaque call or a Triton launch: not the target's own ops
        mem = self.mem
        if func is torch.Tensor.to and mem.emulated:
            return self._to(func, args, kwargs)
        if func is torch.Tensor.cpu and mem.emulated:
            return self._to(torch.Tensor.to, (args[0], "cpu"), {})
        if self.capturing:
            self._refuse(func, args, kwargs)
            if func is F.one_hot and not mem.is_host(args[0]):
                return _one_hot(*args, **kwargs)
        out = func(*args, **kwargs)
        if mem.emulated:
            mem._classify(func, args, kwargs, out)
        return out

    def _refuse(self, func, args: tuple, kwargs: dict) -> None:
        mem = self.mem
        name = getattr(func, "__name__", repr(func))
        if func in _DATA:
            pos = 1 if func is torch.Tensor.new_tensor else 0
            data = args[pos] if len(args) > pos else kwargs.get("data", kwargs.get("obj"))
            device = kwargs.get("device")
            if func is torch.Tensor.new_tensor and device is None:
                on_device = not mem.is_host(args[0])
            else:
                on_device = device is not None and not mem.names_host(device)
            if on_device and not (isinstance(data, torch.Tensor) and not mem.is_host(data)):
                self._raise(PAGEABLE, f"torch.{name}(host data, device=...)")
        elif func in (torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.__array__, torch.Tensor.cpu):
            if not mem.is_host(args[0]):
                self._raise(PAGEABLE, f".{name}() of device memory")
        elif func is torch.Tensor.to and not mem.emulated:
            device, non_blocking = _target(args, kwargs)
            if device is not None:
                self._check_copy(args[0], not mem.names_host(device), non_blocking, ".to()")
        elif func is torch.Tensor.cuda and not mem.emulated:
            self._check_copy(args[0], True, bool(kwargs.get("non_blocking", False)), ".cuda()")
        elif func is F.one_hot and not mem.is_host(args[0]):
            classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
            if classes < 0:
                raise CaptureError(
                    f"one_hot without num_classes at {user_frame(1)} reads the largest class back to the host; "
                    "a CUDA graph cannot capture a host synchronisation: pass num_classes",
                    where=user_frame(1),
                )

    def _check_copy(self, src: torch.Tensor, to_device: bool, non_blocking: bool, op: str) -> None:
        """Refuse a host/device copy of ``src`` to the device (``to_device``) or to the host, as CUDA would."""
        mem = self.mem
        if mem.is_host(src) == (not to_device):
            return  # no crossing
        if to_device and not mem.pinned(src):
            self._raise(PAGEABLE, op + " of pageable host memory")
        if not non_blocking:
            self._raise(BLOCKING if to_device else PAGEABLE, op)

    def _to(self, func, args: tuple, kwargs: dict):
        """``Tensor.to`` on the CPU emulator, where a copy between "host" and "device" is no copy at all."""
        mem, src = self.mem, args[0]
        device, non_blocking = _target(args, kwargs)
        if device is None:
            out = func(*args, **kwargs)
            mem._classify(func, args, kwargs, out)
            return out
        to_device = not mem.names_host(device)
        if mem.is_host(src) != to_device:
            return func(*args, **kwargs)  # stays where it is
        if self.capturing:
            self._check_copy(src, to_device, non_blocking, ".to()")
        rest = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "copy")}
        dtype = next((a for a in args[1:] if isinstance(a, torch.dtype)), rest.pop("dtype", None))
        if isinstance(device, torch.Tensor):
            dtype = dtype or device.dtype
        out = torch.empty(src.shape, dtype=dtype or src.dtype, device=src.device)  # (empty_like would be host work)
        if not to_device:
            mem.mark(out, pinned=non_blocking)  # a non-blocking copy to the host lands in pinned memory
        out.copy_(src, non_blocking=non_blocking)
        return out

    def _raise(self, template: str, op: str) -> None:
        where = user_frame(1)
        raise CaptureError(template.format(op=op, where=where), where=where)


def _one_hot(x: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    """``one_hot`` as CUDA computes it: no range check read back to the host."""
    return torch.zeros(*x.shape, num_classes, dtype=torch.int64, device=x.device).scatter_(-1, x.unsqueeze(-1), 1)

"""Which bytes of its storage a recorded tensor argument spans, how such a region is named, and which
arguments a launch writes: what the diagnosis evidence and its probes say about the regions a graph reads."""

from __future__ import annotations

import torch

from ..engines.recording import Launch, TensorArg

__all__ = ["byte_region", "region_name", "tensor_args", "written_args"]


def byte_region(arg: TensorArg) -> tuple[int, int] | None:
    """The bytes ``[lo, hi)`` of its storage that a tensor argument spans (None when it is empty)."""
    if any(n == 0 for n in arg.shape):
        return None
    es = getattr(torch, arg.dtype.replace("torch.", "")).itemsize
    extent = 1 + sum((n - 1) * abs(st) for n, st in zip(arg.shape, arg.stride))
    return arg.offset * es, (arg.offset + extent) * es


def region_name(path: str, t: torch.Tensor, lo: int, hi: int) -> str:
    """``path`` narrowed to the bytes ``[lo, hi)`` of its storage: ``self.meta[1]``, ``self.meta[0, 1]``,
    ``self.meta[2:4]``, or ``self.meta (bytes 64:128)`` when the bytes are no index range of ``t``."""
    es = t.element_size()
    a, b = lo // es - t.storage_offset(), hi // es - t.storage_offset()
    if lo % es or hi % es or not t.is_contiguous() or a < 0 or b > t.numel() or a >= b:
        return f"{path} (bytes {lo}:{hi})"
    index, shape = [], list(t.shape)
    while shape:
        size = 1
        for n in shape:
            size *= n
        if a == 0 and b == size:
            break
        row = size // shape[0]
        i, j = a // row, (b - 1) // row
        if i == j and len(shape) > 1:  # inside one row: index it and look inside
            index.append(str(i))
            a, b, shape = a - i * row, b - i * row, shape[1:]
            continue
        if a % row or b % row:
            return f"{path} (bytes {lo}:{hi})"
        index.append(str(i) if b // row - i == 1 else f"{i}:{b // row}")
        break
    return f"{path}[{', '.join(index)}]" if index else path


def tensor_args(launch: Launch) -> list[TensorArg]:
    """Every tensor argument of ``launch``, tuples of tensors flattened, in argument order."""
    out: list[TensorArg] = []
    for v in launch.args.values():
        out.extend(x for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, TensorArg))
    return out


def written_args(launch: Launch, kernel_writes: set) -> list[TensorArg]:
    """The tensor arguments ``launch`` writes, in argument order: by its schema (aten), or as learned in
    warm-up (Triton; every tensor argument when none was learned, since a kernel that rewrote identical
    bytes shows no write)."""
    if launch.kind == "aten":
        names = [a for a in launch.args if a in launch.writes]
    else:
        names = [a for a in launch.args if (launch.name, a) in kernel_writes] or list(launch.args)
    out: list[TensorArg] = []
    for a in names:
        v = launch.args[a]
        out.extend(x for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, TensorArg))
    return out

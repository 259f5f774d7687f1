"""What a CUDA capture refuses, aten op by aten op: the emulator's recorder raises where CUDA would.

Measured on a GPU, one op at a time (``tests/targets/conformance``, ``benchmarks/conformance.py``):

* a **host read of device data** fails the capture: ``.item()``, ``bool()``, ``int()`` and ``float()`` of
  a tensor, ``torch.equal``, ``allclose``, ``nonzero`` (and ``argwhere``, ``where(cond)``),
  ``masked_select``, ``unique``, ``unique_consecutive``, ``bincount``, ``repeat_interleave`` of device
  counts without ``output_size``, ``histc`` without a range, indexing with a boolean mask (``x[mask]``,
  ``index_put_`` with a mask, but for one mask and a Python scalar: ``x[mask] = 0.0`` is a masked fill), and
  ``masked_fill`` with a device tensor as the value;
* a **copy from pageable host memory** fails it (``copy_`` from a host tensor, ``index_put_`` of a host
  value), and so does a **blocking copy** between pinned host memory and the device; a non-blocking copy
  from or to pinned memory is captured and runs again on every replay;
* a draw from a **private** ``torch.Generator`` fails it (only the default generator follows a graph).

Captured as CUDA captures them: ``repeat_interleave`` with ``output_size``, ``nonzero_static``, ``histc``
with a range, ``masked_scatter``, ``multinomial`` and every draw from the default generator, a Python
scalar or 0-dim host tensor taken by a device op (its value frozen at capture).  An op whose tensors are
all host memory is no device work: CUDA runs it once, at capture, and a replay does not.
"""

from __future__ import annotations

from typing import Any

import torch

from .host import BLOCKING, PAGEABLE, HostMemory

__all__ = ["refusal", "HOST_READS", "tensors_in"]

#: ops that read device data back to the host whatever their arguments
HOST_READS = {
    "aten::_local_scalar_dense",
    "aten::is_nonzero",
    "aten::equal",
    "aten::allclose",
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::unique_dim",
    "aten::bincount",
}
_INDEX_PUT = {"aten::index_put_", "aten::index_put", "aten::_index_put_impl_"}
_MASKS = (torch.bool, torch.uint8)

SYNC = (
    "{op} reads device data back to the host (.item(), .tolist(), nonzero or a data-dependent shape) at {where}; "
    "a CUDA graph cannot capture a host synchronisation"
)
GENERATOR = (
    "{op} at {where} draws from a torch.Generator of its own; a CUDA graph follows only the default generator "
    "(torch refuses: 'Attempt to increase offset for a CUDA generator not in capture mode'): use the default "
    "generator, or register yours with the graph"
)


def tensors_in(v: Any):
    """The tensors in an op's argument: the tensor itself, or those of a list or tuple, nested."""
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from tensors_in(x)


def _default_generator(gen: torch.Generator) -> bool:
    if gen.device.type == "cpu":
        return gen is torch.default_generator
    if gen.device.type == "cuda":
        return gen is torch.cuda.default_generators[gen.device.index or 0]
    return True


def refusal(func, args: dict[str, Any], host: HostMemory) -> str | None:
    """The message template (``{op}``, ``{where}``) of why CUDA refuses ``func(**args)`` inside a capture,
    or None when CUDA captures it.  ``args``: the op's arguments by schema name."""
    name, overload = func._schema.name, func._overloadname
    gen = args.get("generator")
    if isinstance(gen, torch.Generator) and not _default_generator(gen):
        return GENERATOR
    tensors = [t for v in args.values() for t in tensors_in(v)]
    if not tensors or all(host.is_host(t) for t in tensors):
        return None  # host work, done once at capture
    if name in HOST_READS:
        return SYNC
    if name == "aten::repeat_interleave" and overload == "Tensor" and args.get("output_size") is None:
        return SYNC
    if name == "aten::histc" and args.get("min", 0) == args.get("max", 0):
        return SYNC
    if name == "aten::index" and any(t.dtype in _MASKS for t in tensors_in(args.get("indices"))):
        return SYNC
    if name in _INDEX_PUT:
        indices, value = [i for i in args.get("indices", ()) if i is not None], args["values"]
        if any(i.dtype in _MASKS for i in indices):
            one_scalar = len(indices) == 1 and value.dim() == 0 and host.is_host(value)
            return None if one_scalar else SYNC
        return PAGEABLE if host.is_host(value) else None
    if name.startswith("aten::masked_fill") and overload == "Tensor" and not host.is_host(args["value"]):
        return SYNC
    if name == "aten::copy_":
        dst, src, non_blocking = args["self"], args["src"], bool(args.get("non_blocking", False))
        if host.is_host(src) and not host.is_host(dst):
            if host.wrapped(src):
                return None  # x[a:b] = 0.0: a fill
            return PAGEABLE if not host.pinned(src) else None if non_blocking else BLOCKING
        if host.is_host(dst) and not host.is_host(src):
            return PAGEABLE if not host.pinned(dst) else None if non_blocking else BLOCKING
    return None

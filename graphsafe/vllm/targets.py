"""vLLM's own attention backends as graphsafe targets: ``vllm:TRITON_ATTN``, ``vllm:TRITON_MLA`` and
``vllm:FLEX_ATTENTION``, the classes vLLM ships, driven as its model runner drives them.

* TRITON_ATTN: end to end, its KV-cache write (``do_kv_cache_update``) is Triton;
* TRITON_MLA: decode (``forward_mqa``); its cache write is a compiled op, so the adapter writes the
  latent cache with torch;
* FLEX_ATTENTION: ``torch.compile``'d flex attention; its cache write is a compiled op, replaced by vLLM's
  Triton ``triton_reshape_and_cache_flash`` (the same layout).  The compiled call is recorded as one
  opaque launch (:func:`watch_flex`), its tensors those of the step's metadata.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import torch

from ..engines.recording import opaque_call
from .kinds import AttentionTarget, MLATarget

__all__ = ["TritonAttention", "TritonMLA", "FlexAttention", "watch_flex", "reads_of"]


class TritonAttention(AttentionTarget):
    """vLLM's TRITON_ATTN, as shipped: mixed prefill and decode batches (its builder says ALWAYS), the
    unified Triton attention kernel, its Triton cache write."""

    name = "vllm:TRITON_ATTN"
    backend = "TRITON_ATTN"
    expected: ClassVar[str | None] = None


class TritonMLA(MLATarget):
    """vLLM's TRITON_MLA, as shipped: MLA decode, with speculative tokens where its builder supports
    uniform batches (the spec's ``uniform_query_len``; single-token decode where it does not)."""

    name = "vllm:TRITON_MLA"
    backend = "TRITON_MLA"
    expected: ClassVar[str | None] = None


def _code_names(code: Any) -> set[str]:
    """The attribute and global names a code object (and the code nested in it) uses."""
    names = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names |= _code_names(c)
    return names


def reads_of(fn: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors a mask or score function reads: tensors in its closure, the tensor attributes its code
    names on the objects in its closure (or on the object of a bound method), and those of the functions
    and methods it reaches so, a few levels deep."""
    if fn is None or depth > 4:
        return []
    owner, fn = (fn.__self__, fn.__func__) if inspect.ismethod(fn) else (None, fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    names = _code_names(code)
    held = [owner] if owner is not None else []
    for cell in fn.__closure__ or ():
        try:
            held.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    out: list[torch.Tensor] = []
    for v in held:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif inspect.isfunction(v) or inspect.ismethod(v):
            out += reads_of(v, depth + 1)
        elif v is not None:
            for n in sorted(names):
                a = inspect.getattr_static(v, n, None)  # static: a cached property is not computed by asking
                if isinstance(a, torch.Tensor):
                    out.append(a)
                elif inspect.isfunction(a):
                    out += reads_of(getattr(v, n), depth + 1)
    return out


def _flex_module(impl: Any) -> Any:
    """The module whose ``flex_attention_compiled`` the impl calls (None: it calls none)."""
    for cls in type(impl).__mro__:
        mod = sys.modules.get(getattr(cls, "__module__", ""))
        if mod is not None and hasattr(mod, "flex_attention_compiled"):
            return mod
    return None


@contextlib.contextmanager
def watch_flex(impl: Any) -> Iterator[bool]:
    """Inside this block the impl's ``flex_attention_compiled`` calls are recorded launches
    (``vllm.flex_attention``): the query, key and value, the block mask's tensors and those its mask and
    score functions read (:func:`reads_of`), by storage; the scale and kernel options as host values.
    Yields whether there was such a call to watch."""
    mod = _flex_module(impl)
    if mod is None:
        yield False
        return
    compiled = mod.flex_attention_compiled

    def recorded(query, key, value, score_mod, block_mask, scale, **kwargs):
        found = [t for t in block_mask.as_tuple() if isinstance(t, torch.Tensor)]
        found += reads_of(block_mask.mask_mod) + reads_of(score_mod)
        held = tuple({id(t): t for t in found if t.device == query.device}.values())

        def call(q, k, v, _held):
            return compiled(q, k, v, score_mod, block_mask, scale, **kwargs)

        options = {f"kernel_options.{k}": v for k, v in (kwargs.get("kernel_options") or {}).items()}
        return opaque_call(
            "vllm.flex_attention",
            call,
            query,
            key,
            value,
            held,
            arg_names=("query", "key", "value", "metadata"),
            host_values={"scale": scale, **options},
        )

    mod.flex_attention_compiled = recorded
    try:
        yield True
    finally:
        if mod.flex_attention_compiled is recorded:
            mod.flex_attention_compiled = compiled


class FlexAttention(AttentionTarget):
    """vLLM's FLEX_ATTENTION, as shipped: its builder copies the step into persistent buffers (vLLM #36298)
    and returns two fresh tensors every build that the captured attention never reads (not a hazard)."""

    name = "vllm:FLEX_ATTENTION"
    backend = "FLEX_ATTENTION"
    expected: ClassVar[str | None] = None
    cache_write = "triton"

    def attend(self, rows: int):
        with watch_flex(self.impl):
            return super().attend(rows)

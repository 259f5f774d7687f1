"""Make a FlashInfer wrapper's kernel calls visible to graphsafe's recorder.

FlashInfer's ``run()`` reaches its kernels through its kernel module (``wrapper._cached_module``, and
for MLA the planned backend's), TVM-FFI functions outside the aten dispatcher and Triton.  Inside
:func:`watch`, every call of that module is a :func:`graphsafe.opaque_call`: its tensors (workspaces,
the fixed index buffers, the caches, the output) are recorded by storage, and its other arguments,
the plan's values (``plan_info``, by field) among them, as host values the capture freezes.  Argument
names follow FlashInfer 0.7's kernel modules; a module of another version is recorded with
``arg<i>`` names past the known ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..engines.recording import opaque_call, opaque_enabled

__all__ = ["watch", "PLAN_INFO_FIELDS"]

_COMMON = ("float_workspace", "int_workspace", "plan_info")
_ARG_NAMES: dict[str, tuple[str, ...]] = {
    # the decode module (no tensor cores) and the MLA module share the name "run": told apart by family
    "decode.run": _COMMON
    + (
        "q",
        "k_cache",
        "v_cache",
        "paged_kv_indptr",
        "paged_kv_indices",
        "paged_kv_last_page_len",
        "out",
        "lse",
        "kv_layout",
        "window_left",
        "enable_pdl",
        "alibi_slopes",
        "logits_soft_cap",
        "sm_scale",
        "rope_scale",
        "rope_theta",
    ),
    "paged_run": _COMMON
    + (
        "q",
        "k_cache",
        "v_cache",
        "qo_indptr",
        "paged_kv_indptr",
        "paged_kv_indices",
        "paged_kv_last_page_len",
        "out",
        "lse",
        "mask_mode",
        "kv_layout",
        "window_left",
        "enable_pdl",
        "custom_mask",
        "mask_indptr",
        "alibi_slopes",
        "prefix_len_ptr",
        "token_pos_in_items_ptr",
        "max_item_len_ptr",
        "logits_soft_cap",
        "sm_scale",
        "scale_q",
        "scale_k",
        "scale_v",
        "rope_scale",
        "rope_theta",
        "token_pos_in_items_len",
        "workspace_size",
    ),
    "mla.run": _COMMON
    + (
        "q_nope",
        "q_pe",
        "ckv_cache",
        "kpe_cache",
        "kv_indices",
        "out",
        "lse",
        "mask_mode",
        "num_heads",
        "page_size",
        "sm_scale",
        "return_lse_base_on_e",
        "ckv_scale",
        "kpe_scale",
        "ckv_scale_arr",
    ),
}

#: FlashInfer's plan info vectors by length (``DecodePlanInfo``, ``PrefillPlanInfo``, ``MLAPlanInfo``)
PLAN_INFO_FIELDS: dict[int, tuple[str, ...]] = {
    10: (
        "padded_batch_size",
        "v_offset",
        "s_offset",
        "request_indices_offset",
        "kv_tile_indices_offset",
        "o_indptr_offset",
        "block_valid_mask_offset",
        "kv_chunk_size_ptr_offset",
        "enable_cuda_graph",
        "split_kv",
    ),
    15: (
        "padded_batch_size",
        "total_num_rows",
        "total_num_rows_offset",
        "cta_tile_q",
        "request_indices_offset",
        "qo_tile_indices_offset",
        "kv_tile_indices_offset",
        "merge_indptr_offset",
        "o_indptr_offset",
        "kv_chunk_size_ptr_offset",
        "v_offset",
        "s_offset",
        "block_valid_mask_offset",
        "enable_cuda_graph",
        "split_kv",
    ),
    18: (
        "num_blks_x",
        "num_blks_y",
        "q_indptr_offset",
        "kv_indptr_offset",
        "partial_indptr_offset",
        "merge_packed_offset_start_offset",
        "merge_packed_offset_end_offset",
        "merge_partial_packed_offset_start_offset",
        "merge_partial_packed_offset_end_offset",
        "merge_partial_stride_offset",
        "q_len_offset",
        "kv_len_offset",
        "q_start_offset",
        "kv_start_offset",
        "kv_end_offset",
        "work_indptr_offset",
        "partial_o_offset",
        "partial_lse_offset",
    ),
}


def _family(wrapper: Any) -> str:
    name = type(wrapper).__name__
    return "mla" if "MLA" in name else "prefill" if "Prefill" in name else "decode"


def _plan_fields(plan_info: Any) -> dict[str, Any] | None:
    try:
        values = [int(plan_info[i]) for i in range(len(plan_info))]
    except Exception:  # noqa: BLE001 - not a sequence of ints: recorded as it is
        return None
    fields = PLAN_INFO_FIELDS.get(len(values))
    return None if fields is None else {f"plan_info.{f}": v for f, v in zip(fields, values)}


class _Watched:
    """A kernel module whose calls are recorded as opaque launches ``flashinfer.<family>.<function>``."""

    def __init__(self, module: Any, family: str):
        self._module, self._family = module, family

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if not callable(attr):
            return attr
        label = f"flashinfer.{self._family}.{name}"
        known = _ARG_NAMES.get(f"{self._family}.{name}") or _ARG_NAMES.get(name, ())

        def call(*args: Any, **kwargs: Any) -> Any:
            names: list[str | None] = list(known[: len(args)])
            host: dict[str, Any] = {}
            if "plan_info" in names:
                fields = _plan_fields(args[names.index("plan_info")])
                if fields is not None:  # recorded field by field, so that a finding names the field
                    names[names.index("plan_info")] = None
                    host = fields
            return opaque_call(label, attr, *args, arg_names=names, host_values=host, **kwargs)

        return call


@contextlib.contextmanager
def watch(wrapper: Any) -> Iterator[int]:
    """Inside this block, ``wrapper``'s kernel-module calls are recorded launches (see the module
    docstring); yields how many kernel modules it found (0: nothing of this wrapper will be seen; always 0
    with ``GRAPHSAFE_OPAQUE=0``).

    Example::

        with graphsafe.flashinfer.watch(decode_wrapper):
            decode_wrapper.run(q, (k_cache, v_cache), out=out)
    """
    if not opaque_enabled():  # GRAPHSAFE_OPAQUE=0: the graph reader alone must see the wrapper's kernels
        yield 0
        return
    family = _family(wrapper)
    swapped = []
    for holder in (wrapper, getattr(wrapper, "_planned_backend", None)):
        if holder is None:
            continue
        module = getattr(holder, "_cached_module", None)
        if module is not None and not isinstance(module, _Watched):
            proxy = _Watched(module, family)
            holder._cached_module = proxy
            swapped.append((holder, module, proxy))
    try:
        yield len(swapped)
    finally:
        for holder, module, proxy in swapped:
            if getattr(holder, "_cached_module", None) is proxy:  # a run() that re-planned keeps its new module
                holder._cached_module = module

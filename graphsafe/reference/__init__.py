"""Reference targets: five attention backends modelled on real CUDA-graph bugs, each with a
fixed variant and buggy variants that differ from it as little as possible.

Every class has ``name`` (its registered name) and ``expected`` (the finding kind the
checker must report, ``None`` for a fixed variant)::

    from graphsafe.reference import resolve, FIXED, BUGGY
    cls = resolve("flex:fresh_metadata")
    cls.expected   # "unpersisted-metadata"

The same names are registered as entry points in the ``graphsafe.targets`` group.  Kernels
are Triton; without a GPU they run under the Triton interpreter, switched on here before
any kernel module is imported.
"""

from __future__ import annotations

from ..engines.triton_env import use_interpreter
from ..family import Family


def _require_interpretable_triton() -> None:
    """Under the interpreter, triton.language's own jit helpers (tl.max, tl.sum) must be
    interpretable too, which only happens when TRITON_INTERPRET was set before the first
    ``import triton``; otherwise every kernel fails deep inside with "Cannot call
    @triton.jit'd outside of the scope of a kernel".  Say so up front."""
    # imported here, after use_interpreter() below has had its say about TRITON_INTERPRET
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(tl.max, InterpretedFunction):
        raise ImportError(
            "graphsafe.reference needs the Triton interpreter (no GPU here), but triton was imported "
            "before TRITON_INTERPRET=1 was set. Set TRITON_INTERPRET=1 in the environment, or import "
            "graphsafe.reference (or call graphsafe.engines.triton_env.use_interpreter()) before triton."
        )


if use_interpreter():  # must precede the kernel modules' @triton.jit definitions
    _require_interpretable_triton()

__all__ = ["REGISTRY", "FIXED", "BUGGY", "FAMILY", "names", "resolve"]

# name -> (module, class); modules are imported on first use.
_TARGETS: dict[str, tuple[str, str]] = {
    "triton_mla": ("triton_mla", "TritonMLA"),
    "triton_mla:capture_max_seq_len": ("triton_mla", "TritonMLACaptureMaxSeqLen"),
    "triton_mla:nan_padding": ("triton_mla", "TritonMLANanPadding"),
    "mla_indexer": ("mla_indexer", "MLAIndexer"),
    "mla_indexer:no_tail_zero": ("mla_indexer", "MLAIndexerNoTailZero"),
    "mla_indexer:frozen_uniform_branch": ("mla_indexer", "MLAIndexerFrozenUniformBranch"),
    "flex": ("flex", "Flex"),
    "flex:fresh_metadata": ("flex", "FlexFreshMetadata"),
    "flex:batch_sized_buffers": ("flex", "FlexBatchSizedBuffers"),
    "flashmla_lazy": ("flashmla_lazy", "FlashMLALazy"),
    "flashmla_lazy:shared_state": ("flashmla_lazy", "FlashMLALazySharedState"),
    "flashmla_fp8": ("flashmla_fp8", "FlashMLAFP8"),
    "flashmla_fp8:fresh_buffers": ("flashmla_fp8", "FlashMLAFP8FreshBuffers"),
}

#: fixed variants (no finding expected)
FIXED: list[str] = [n for n in _TARGETS if ":" not in n]
#: buggy variants (``backend:bug``)
BUGGY: list[str] = [n for n in _TARGETS if ":" in n]


#: the reference kernels as a family: they run anywhere (the Triton interpreter without a GPU), and the group
#: ``all`` stands for them
FAMILY = Family(
    prefix="reference",
    package=__name__,
    targets={name: f"{module}:{cls}" for name, (module, cls) in _TARGETS.items()},
    safe=tuple(FIXED),
    needs_gpu=False,
    in_all=True,
)


def names() -> list[str]:
    """Every registered target name, fixed and buggy."""
    return list(_TARGETS)


def resolve(name: str) -> type:
    """The target class registered as ``name``; :class:`~graphsafe.errors.UsageError` listing the known names
    otherwise."""
    return FAMILY.resolve(name if isinstance(name, str) else repr(name))


def __getattr__(attr: str):
    # REGISTRY imports every kernel module, so it is built on first access.
    if attr == "REGISTRY":
        registry = {n: resolve(n) for n in _TARGETS}
        globals()["REGISTRY"] = registry
        return registry
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

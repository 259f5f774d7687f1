"""A CPU stand-in for the parts of FlashInfer graphsafe's FlashInfer targets drive, in plain torch.

Same constructors, ``plan()`` and ``run()`` as FlashInfer 0.7's ``BatchDecodeWithPagedKVCacheWrapper``,
``BatchPrefillWithPagedKVCacheWrapper`` and ``mla.BatchMLAPagedAttentionWrapper`` (the arguments the
targets use), the same buffer semantics (CUDA-graph mode copies into fixed buffers, the default mode
rebinds them), a schedule in the int workspace and the plan's host values passed to a kernel module
(``_cached_module``) the way FlashInfer's are.  It lets the FlashInfer targets, their buggy variants and
the adapter logic run under the CPU emulator in CI; it proves nothing about FlashInfer itself, whose
runs are the GPU campaign (``benchmarks/flashinfer_campaign.py``).  Each wrapper logs its ``plan()`` and
``run()`` calls in ``calls``.

Example::

    from graphsafe.flashinfer import standin
    ws = torch.zeros(1 << 20, dtype=torch.uint8)
    w = standin.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
"""

from . import mla
from .paged import BatchDecodeWithPagedKVCacheWrapper, BatchPrefillWithPagedKVCacheWrapper

__version__ = "graphsafe-standin"
__all__ = ["BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper", "mla", "__version__"]

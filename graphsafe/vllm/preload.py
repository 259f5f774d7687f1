"""What the fork server imports for vLLM targets (``VllmTarget.preload``), once for every sandbox child.

vLLM takes seconds to import (``vllm.config`` most of it; ``import_cost`` in
``benchmarks/results/vllm-cuda-gpu.json``): imported here, in the fork server, before any child forks, it costs that once per process that starts sandboxes instead of once
per target.  It imports vLLM's config and the modules of the backends graphsafe registers; nothing here
touches CUDA.  A backend that does not import (a release without it) is left for its check to report.
"""

from __future__ import annotations

from .library import FAMILY

#: vLLM's modules of the registered backends (TRITON_ATTN, TRITON_MLA, FLEX_ATTENTION)
MODULES = (
    "vllm.v1.attention.backends.triton_attn",
    "vllm.v1.attention.backends.mla.triton_mla",
    "vllm.v1.attention.backends.flex_attention",
)

FAMILY.import_ahead(MODULES)

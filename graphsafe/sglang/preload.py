"""What the fork server imports for SGLang targets (``SglangTarget.preload``), once for every sandbox child.

SGLang's backend import chains are slow (each campaign row's ``startups`` in
``benchmarks/results/sglang-cuda-gpu.json`` says how slow): imported here, in the fork server, before any child
forks, they cost that once per process that starts sandboxes.  Nothing here touches CUDA; a backend that does
not import is left for its check to report.
"""

from __future__ import annotations

from .library import FAMILY

#: SGLang's modules of the registered backends
MODULES = (
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.flashinfer_backend",
)

FAMILY.import_ahead(MODULES)

"""What the fork server imports once, so that every sandbox child forked from it starts warm.

Imported by the ``forkserver`` process that :mod:`.server` starts (``set_forkserver_preload``), with
``TRITON_INTERPRET`` already decided in its environment ("1": the emulator, "0": CUDA) and
``PYTORCH_NVML_BASED_CUDA_CHECK=1``, so that nothing here reaches the CUDA driver.  It imports
torch, torch._dynamo (seconds; graphsafe's recorder pulls it in on its first operation),
hypothesis, graphsafe (its package is imported before this module), the sandbox child's code and the
modules the parent named in ``GRAPHSAFE_PRELOAD`` (the targets' ``preload``: vLLM for vLLM targets), and
records in :data:`STATE` what its children inherit; each child reports that state when it is ready.  Then
it freezes what it imported (``gc.freeze``).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import threading

# before torch is imported: device queries through NVML, never through the CUDA driver
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import hypothesis  # noqa: E402,F401
import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401

from ...engines.triton_env import interpreter_active, use_interpreter  # noqa: E402
from ..options import register_profiles  # noqa: E402
from . import child  # noqa: E402,F401  (the children's entry point)
from .server import PRELOAD_ENV  # noqa: E402

if interpreter_active():  # decided by the parent; here only Triton's autotuner is adapted to it
    use_interpreter(force=True)
register_profiles()

#: the further modules the parent asked for (a target's library), and why any of them did not import
PRELOADED: dict[str, str] = {}
for _name in filter(None, os.environ.get(PRELOAD_ENV, "").split(",")):
    try:
        importlib.import_module(_name)
        PRELOADED[_name] = ""
    except Exception as _e:  # noqa: BLE001 - the child imports it again, and its check reports the error
        PRELOADED[_name] = f"{type(_e).__name__}: {_e}"

#: what every child of this server inherits (reported by the child when it is ready)
STATE = {
    "pid": os.getpid(),
    "interpret": interpreter_active(),
    "cuda_initialized": torch.cuda.is_initialized(),
    "python_threads": threading.active_count(),
    "preloaded": dict(PRELOADED),
    "files": {name: getattr(sys.modules.get(name), "__file__", None) for name in ("torch", "hypothesis", "graphsafe")},
}

# What was imported here stays for the children's lifetime: their collections skip it (a full
# collection walks about 300k objects after these imports), and their pages stay shared.
gc.freeze()

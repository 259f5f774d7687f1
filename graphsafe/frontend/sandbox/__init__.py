"""Sandboxes: each target's checks in a child process of its own.

``parent`` (the :class:`Sandbox` a caller holds), ``child`` (the process's side), ``wire`` (what
crosses between them), ``faults`` (what a death means, where the target was) and ``pool`` (one
sandbox per target, a few children alive at once).
"""

from .child import cuda_context_ok
from .parent import Sandbox
from .pool import MAX_LIVE, close_all, get_sandbox

__all__ = ["Sandbox", "get_sandbox", "close_all", "cuda_context_ok", "MAX_LIVE"]

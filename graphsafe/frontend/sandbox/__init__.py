"""Sandboxes: each target's checks in a child process of its own.

``parent`` (the :class:`Sandbox` a caller holds), ``child`` (the process's side), ``wire`` (what
crosses between them), ``faults`` (what a death means, where the target was), ``pool`` (one
sandbox per target, a few children alive at once) and ``server`` with ``preload`` (the fork server
the children start from: torch and graphsafe imported once per process, not once per target).
"""

from .child import cuda_context_ok
from .parent import Sandbox
from .pool import MAX_LIVE, close_all, get_sandbox
from .server import warm

__all__ = ["Sandbox", "get_sandbox", "close_all", "cuda_context_ok", "MAX_LIVE", "warm"]

"""Sandboxes: each target's checks in a child process of its own.

``parent`` (the :class:`Sandbox` a caller holds), ``child`` (the process's side), ``wire`` (what
crosses between them), ``faults`` (what a death means, where the target was), ``pool`` (one
sandbox per target, a few children alive at once) and ``server`` with ``preload`` (the fork server
the children start from: torch and graphsafe imported once per process, not once per target).

Importing this package imports none of them (and not torch): ``server.start_early`` runs before the
process imports torch.  Each name below is imported from its module on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .child import cuda_context_ok
    from .parent import Sandbox
    from .pool import MAX_LIVE, close_all, get_sandbox
    from .server import warm

#: each public name and the module that defines it
_HOMES = {
    "Sandbox": "parent",
    "get_sandbox": "pool",
    "close_all": "pool",
    "cuda_context_ok": "child",
    "MAX_LIVE": "pool",
    "warm": "server",
}
__all__ = ["Sandbox", "get_sandbox", "close_all", "cuda_context_ok", "MAX_LIVE", "warm"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)

"""A runtime guard for captured graphs in a real engine: catch a dead or rebound input at replay.

``graphsafe.guard`` is this module; its class is ``graphsafe.guard.Guard``::

    import graphsafe

    guard = graphsafe.guard.Guard(owner=builder, mode="sample", every=100, on_failure="raise")
    with guard.capture(key=batch_size):               # around engine.capture(...) or inside torch.cuda.graph
        out = forward()
    ...
    guard.before_replay(key=batch_size, host_values={"num_kv_splits": n})
    graph.replay()

At capture it records, with graphsafe's recorder, every storage each aten op and Triton launch
reads, the owner's attribute paths to them, and the host values of the Triton launches.  Before
a replay it checks (``sample``: the first replay of each graph, then every N-th; ``strict``:
every one; ``off``: nothing, recorded or checked) that each storage is alive (weak references:
the guard never keeps one alive), that each path still holds it, and that the host values the
runner passes equal the captured ones.  A failure is a :class:`graphsafe.Finding`:

* ``stale-pointer``: a storage was freed after capture (where: its path);
* ``unpersisted-metadata``: a path was rebound while the captured storage lives on, so this
  step's values go where the graph does not read;
* ``frozen-host-value``: a host value the replay needs differs from the captured one.

It is raised as :class:`graphsafe.GuardError` (``.finding``), logged on the ``graphsafe.guard``
logger, or handed to a callable, and its report written when ``report_dir`` is set.
"""

from __future__ import annotations

from ..errors import GuardError
from .core import MODES, ON_FAILURE, Guard

__all__ = ["Guard", "GuardError", "MODES", "ON_FAILURE"]

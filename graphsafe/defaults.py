"""Every default of graphsafe's options, in one place.

This module imports nothing, so that the pytest plugin can name the defaults in ``pytest --help``
without importing torch.  :class:`graphsafe.CheckOptions` takes its field defaults from here, and
:mod:`graphsafe.frontend.options` (where every front end's options are resolved) the rest.

Example::

    from graphsafe import defaults
    defaults.PROFILES["ci"]   # ("graphsafe-ci", 25): the Hypothesis profile and its examples per check
"""

from __future__ import annotations

__all__ = [
    "ENGINE",
    "EXAMPLES",
    "STEPS",
    "CAPTURE",
    "AUDIT_EXAMPLES",
    "TIMEOUT_S",
    "ISOLATION",
    "PROFILES",
]

#: the engine when none is named: ``cuda`` where a GPU is visible, else ``emulate``
ENGINE = "auto"
#: Hypothesis examples per check when neither a number nor a profile is given
EXAMPLES = 50
#: most batches in one drawn step sequence
STEPS = 4
#: how graphs are captured: every capture policy, one phase each
CAPTURE = "explore"
#: examples per cell of an audit (an audit runs one check per batch kind and capture policy)
AUDIT_EXAMPLES = 20
#: seconds one check may take before it is stopped, isolated or not
TIMEOUT_S = 600.0
#: where a check runs: ``none`` in the calling process, ``target`` in a process of the target's own
#: (each front end's default is in :data:`graphsafe.frontend.options.FRONTS`)
ISOLATION = ("none", "target")
#: short name -> (Hypothesis profile, examples per check under it)
PROFILES: dict[str, tuple[str, int]] = {
    "fast": ("graphsafe-fast", 10),
    "ci": ("graphsafe-ci", 25),
    "thorough": ("graphsafe-thorough", 200),
}

"""The check layer: one check in this process (options, target resolution, plans, the step loop,
diagnosis).  The front end (:mod:`graphsafe.frontend`) adds isolation, timeouts and reports."""

from .api import Progress, reproduce, run_check
from .audit import AuditResult, audit
from .options import DEFAULT_EXAMPLES, DEFAULT_STEPS, CheckOptions
from .targets import expand, lookup, names, resolve_target, target_name, validate_target

__all__ = [
    "audit",
    "AuditResult",
    "run_check",
    "reproduce",
    "Progress",
    "CheckOptions",
    "DEFAULT_EXAMPLES",
    "DEFAULT_STEPS",
    "expand",
    "lookup",
    "names",
    "resolve_target",
    "target_name",
    "validate_target",
]

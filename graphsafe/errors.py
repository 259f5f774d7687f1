"""Every error graphsafe raises on purpose, and what each means for an exit code and a pytest outcome.

::

    GraphsafeError                      base; an unclassified one is graphsafe's own bug (exit 4)
    ├── UsageError (ValueError)         a bad option or argument: unknown target, engine or probe,
    │                                   examples=0, an unusable report folder             (exit 2)
    ├── ContractError (TypeError)       the target class breaks the contract: no forward(),
    │   │                               forward() returns an int, static() holds a float   (exit 2)
    │   └── SpecError (ValueError)      a CaptureSpec or Batch field breaks its rule       (exit 2)
    ├── TargetFailure                   the target itself failed to run                    (exit 3)
    │   ├── TargetRaised                it raised in setup(), prepare() or forward() (out of memory too)
    │   ├── TargetCrashed               its process died (a segfault, abort, the OOM killer)
    │   │   └── ContextBroken           it left its process's CUDA context unusable
    │   └── TargetTimeout               no result within the timeout
    ├── CaptureError                    forward() cannot be captured (a host sync); becomes a
    │                                   ``capture-failure`` finding                        (exit 1)
    ├── GuardError                      graphsafe.guard found a hazard before a replay; carries the
    │                                   Finding                                            (exit 1)
    └── InternalError                   graphsafe failed; carries the original traceback  (exit 4)

Exit codes of ``graphsafe check`` (the highest that applies to any target): 0 no findings, 1 findings,
2 usage or contract error, 3 a target failed to run, 4 graphsafe's own error.  The pytest plugin maps
them the same way: findings and target failures fail the item, usage and contract errors make it an
error, an internal error is an error with its traceback.

Every class is picklable with its fields (they cross the sandbox's process boundary) and carries
plain data only: a target's own exception travels as its type name, message and traceback text.
"""

from __future__ import annotations

import traceback as _traceback
from typing import Any, ClassVar

__all__ = [
    "EXIT_OK",
    "EXIT_FINDINGS",
    "EXIT_USAGE",
    "EXIT_TARGET",
    "EXIT_INTERNAL",
    "GraphsafeError",
    "UsageError",
    "ContractError",
    "SpecError",
    "TargetFailure",
    "TargetRaised",
    "TargetCrashed",
    "ContextBroken",
    "TargetTimeout",
    "CaptureError",
    "GuardError",
    "InternalError",
    "exit_code",
    "internal",
]

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_TARGET, EXIT_INTERNAL = 0, 1, 2, 3, 4


class GraphsafeError(Exception):
    """Base of graphsafe's errors.  ``exit_code`` and ``pytest_outcome`` say what it means to a run."""

    exit_code: ClassVar[int] = EXIT_INTERNAL
    #: "failed" (the backend is at fault) or "error" (the run could not judge it)
    pytest_outcome: ClassVar[str] = "error"
    #: keyword fields beyond the message, kept through pickling
    _fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str = "", **fields: Any):
        super().__init__(message)
        for name in self._fields:
            setattr(self, name, fields.pop(name, getattr(type(self), name, None)))
        if fields:
            raise TypeError(f"{type(self).__name__} got unknown fields {sorted(fields)}")

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, {n: getattr(self, n) for n in self._fields}))


def _rebuild(cls: type, message: str, fields: dict[str, Any]) -> GraphsafeError:
    return cls(message, **fields)


class UsageError(GraphsafeError, ValueError):
    """A bad option or argument; the message is one line that says what to give instead."""

    exit_code = EXIT_USAGE


class ContractError(GraphsafeError, TypeError):
    """The target breaks graphsafe's contract (see :class:`graphsafe.Target`); the message names the
    method or attribute and the fix."""

    exit_code = EXIT_USAGE


class SpecError(ContractError, ValueError):
    """A :class:`~graphsafe.CaptureSpec` or :class:`~graphsafe.Batch` field breaks its rule."""


class TargetFailure(GraphsafeError):
    """The target itself failed to run.  ``where`` is the innermost frame of the target's own code."""

    exit_code = EXIT_TARGET
    pytest_outcome = "failed"
    _fields: ClassVar[tuple[str, ...]] = ("where",)
    where: str = ""


class TargetRaised(TargetFailure):
    """The target raised in ``method`` (``setup(spec, device)``, ``prepare(batch)``, ``forward()``).

    ``exc_type`` and ``traceback`` are the original exception's type name and formatted traceback;
    ``out_of_memory`` is set when it was an allocation failure.
    """

    _fields: ClassVar[tuple[str, ...]] = ("where", "method", "exc_type", "traceback", "out_of_memory")
    method: str = ""
    exc_type: str = ""
    traceback: str = ""
    out_of_memory: bool = False


class TargetCrashed(TargetFailure):
    """The target's process died before answering; ``exitcode`` is negative for a signal."""

    _fields: ClassVar[tuple[str, ...]] = ("where", "exitcode")
    exitcode: int | None = None


class ContextBroken(TargetCrashed):
    """The check left its process's CUDA context unusable; the process was discarded.

    When a replay faulted (an illegal memory access), ``steps`` are the example's step batches (as dicts),
    ``step`` the one whose replay faulted and ``size`` its graph's size; a check stops at the first fault
    (nothing more can run in that process), so the example is the one drawn, not shrunk.
    """

    _fields: ClassVar[tuple[str, ...]] = ("where", "exitcode", "steps", "step", "size", "capture")
    steps: Any = ()
    step: int = -1
    size: int = 0
    capture: Any = None  # how the example's graph was captured: {"policy": name, "batch": a drawn batch or None}


class TargetTimeout(TargetFailure):
    """No result within ``timeout`` seconds; the check was stopped (its process killed when isolated)."""

    _fields: ClassVar[tuple[str, ...]] = ("where", "timeout")
    timeout: float = 0.0

    #: what a timeout's message gives as its possible causes, in-process and isolated alike
    CAUSES: ClassVar[str] = (
        "the target hangs (an endless loop or kernel, or a blocking call), or the check needs more time "
        "(shrinking a failure runs it hundreds of times: raise the timeout)"
    )


class ReplayHung(TargetTimeout):
    """A replay ran far past every replay before it (a kernel that does not end) and its process was killed
    (isolated checks only).  ``steps`` are the example's step batches (as dicts), ``step`` the one whose
    replay hung, ``size`` its graph's size, ``seconds`` how long it had run, ``longest`` the longest replay
    before it."""

    _fields: ClassVar[tuple[str, ...]] = ("where", "timeout", "steps", "step", "size", "seconds", "longest", "capture")
    steps: Any = ()
    step: int = 0
    size: int = 0
    seconds: float = 0.0
    longest: float = 0.0
    capture: Any = None  # as ContextBroken's


class CaptureError(GraphsafeError):
    """``forward()`` did something a CUDA graph cannot capture (a host read of graph data)."""

    exit_code = EXIT_FINDINGS
    pytest_outcome = "failed"
    _fields: ClassVar[tuple[str, ...]] = ("where",)
    where: str = ""


class GuardError(GraphsafeError):
    """:class:`graphsafe.guard.Guard` found a hazard before a replay (``on_failure="raise"``).

    ``finding`` is the first :class:`~graphsafe.Finding` (kind ``stale-pointer``,
    ``unpersisted-metadata`` or ``frozen-host-value``), ``findings`` every one that check made.
    The replay it guarded has not run.
    """

    exit_code = EXIT_FINDINGS
    pytest_outcome = "failed"
    _fields: ClassVar[tuple[str, ...]] = ("finding", "findings")
    finding: Any = None
    findings: Any = ()


class InternalError(GraphsafeError):
    """graphsafe itself failed; ``traceback`` holds the original traceback (shown with ``--debug``)."""

    _fields: ClassVar[tuple[str, ...]] = ("exc_type", "traceback")
    exc_type: str = ""
    traceback: str = ""


def internal(exc: BaseException) -> InternalError:
    """``exc`` (any exception graphsafe did not raise on purpose) as a picklable :class:`InternalError`."""
    return InternalError(
        f"graphsafe failed: {type(exc).__name__}: {exc}",
        exc_type=type(exc).__name__,
        traceback="".join(_traceback.format_exception(type(exc), exc, exc.__traceback__)),
    )


def exit_code(outcome: Any) -> int:
    """The exit code for a :class:`~graphsafe.CheckResult` or an exception.

    A result is 0 when ok, 3 when a finding says the target failed to run (``target-error``), else 1.
    A :class:`GraphsafeError` gives its class's code; any other exception is graphsafe's own error (4).
    """
    if isinstance(outcome, BaseException):
        return outcome.exit_code if isinstance(outcome, GraphsafeError) else EXIT_INTERNAL
    if outcome is None or outcome.ok:
        return EXIT_OK
    return EXIT_TARGET if "target-error" in outcome.kinds else EXIT_FINDINGS

"""Run one check the way every front end does: isolated or here, with a timeout, writing reports.

:func:`run` is the one path the command line, the pytest plugin's items, the ``graphsafe`` fixture
and :func:`graphsafe.check` share.  With ``isolate="target"`` the check runs in the target's
sandbox child (:mod:`graphsafe.frontend.sandbox`), which the parent kills after ``timeout``; with
``"none"`` it runs here under a deadline.  On CUDA without isolation, a check that leaves the
process's CUDA context unusable makes every later CUDA check of the process fail at once, naming
the check that broke it, instead of failing in a cascade of unrelated errors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..capture.compare import Tolerance
from ..checker import CheckOptions, Progress
from ..checker.audit import AUDIT_CAPTURE, AuditResult
from ..checker.audit import audit as run_audit
from ..contract import CaptureSpec
from ..engines import Engine
from ..errors import ContextBroken, ContractError, GraphsafeError
from ..findings import CheckResult
from ..reports.audit import write_audit
from . import threads
from .devices import uses_cuda, worker_device
from .inprocess import run_here
from .options import RunOptions, keywords, resolve
from .sandbox import cuda_context_ok, get_sandbox
from .sandbox.parent import display_name

__all__ = ["run", "check", "audit", "RunOptions"]

#: the check that left this process's CUDA context unusable (without isolation), if any
_broken_by: list[str] = []


def run(
    target: Any,
    check: CheckOptions,
    options: RunOptions = RunOptions(),
    *,
    label: str = "",
    progress: Callable[[Progress], None] | None = None,
    device: int | None = None,
) -> CheckResult:
    """One check of ``target``: the :class:`CheckResult`, or a :class:`~graphsafe.errors.GraphsafeError`
    (usage and contract errors, a target that crashed, hung or broke its CUDA context).  ``progress``
    is called after every example, from this process, isolated or not.  ``device``: the GPU an
    isolated check runs on (default: this xdist worker's, see :func:`~graphsafe.frontend.devices.worker_device`)."""
    label = label or display_name(target)
    try:
        return _run(target, check, options, label, progress, device)
    except ContractError as e:  # found while running: say which target
        if e.message.startswith(label):
            raise
        raise type(e)(f"{label}: {e.message}") from None


def _run(
    target: Any, check: CheckOptions, options: RunOptions, label: str, progress, device: int | None
) -> CheckResult:
    engine = check.engine.name if isinstance(check.engine, Engine) else check.engine
    if options.isolate == "target" and not isinstance(check.engine, Engine):
        box = get_sandbox(target, engine=engine, device=device if device is not None else worker_device(engine))
        return box.check(check, options, label, progress=progress)
    cuda = uses_cuda(engine)
    if cuda and _broken_by:
        raise ContextBroken(
            f"{label}: CUDA context broken by {_broken_by[0]}; rerun with isolation "
            "(--isolate, --graphsafe-isolate target)"
        )
    threads.apply_here()  # this process is the check's: the host's cores shared by the checks at once
    try:
        result = run_here(target, check, options, label=label, progress=progress)
    except GraphsafeError:
        _note_broken(cuda, label)
        raise
    except Exception as e:
        if _note_broken(cuda, label):
            first = str(e).strip().splitlines()
            raise ContextBroken(
                f"{label}: the check raised {type(e).__name__}: {first[0] if first else ''}, and this process's "
                "CUDA context was unusable afterwards; the remaining CUDA checks of this process will fail: rerun "
                "with isolation"
            ) from e
        raise
    if not result.ok:
        _note_broken(cuda, label)
    return result


def _note_broken(cuda: bool, label: str) -> bool:
    """After a failure on CUDA: remember ``label`` when the context no longer works; True if so."""
    if cuda and not _broken_by and not cuda_context_ok():
        _broken_by.append(label)
        return True
    return False


def check(
    target: Any,
    *,
    spec: CaptureSpec | None = None,
    engine: str | Engine | None = None,
    examples: int | None = None,
    steps: int | None = None,
    capture_sizes: Iterable[int] | None = None,
    probes: Iterable[str] | str | None = None,
    capture: Any = None,
    tolerance: Tolerance | None = None,
    seed: int | None = None,
    device: Any = None,
    database: str | bool | None = None,
    report_dir: str | None = None,
    isolate: str | None = None,
    timeout: float | None = None,
) -> CheckResult:
    """Capture ``target``, replay drawn step sequences, and report capture hazards.

    ``target`` is a :class:`graphsafe.Target` subclass, ``"module:Class"`` or a registered name
    (``graphsafe list``).  ``engine`` is ``"cuda"``, ``"emulate"`` or ``"auto"`` (the default: cuda
    where a GPU is visible).  ``examples`` (default 50) Hypothesis examples of up to ``steps``
    (default 4) batches each are run; each failure is shrunk to a minimal step sequence.  ``probes``
    restricts which finding kinds are reported (default: all).  ``capture`` says how graphs are
    captured (default ``"explore"``: worst-case, ascending, minimal and drawn batches; or a policy
    name, names, or a function ``size -> Batch``).  ``tolerance`` sets how close graph and eager must
    be.  With ``report_dir``, a report is written for every finding.  ``timeout`` (seconds, default
    600) stops a check that hangs.  None means the default (:mod:`graphsafe.defaults`).

    ``isolate``: by default (``"none"``) the check runs in the calling process, under Hypothesis'
    current settings, and nothing is started behind the caller's back: the target may be a class
    that only this process can import (defined in a notebook or a test), and one check of one target
    is what this function does.  ``isolate="target"`` runs it in a child process of the target's own,
    which a crash, a hang or a broken CUDA context takes down instead of the caller.  On CUDA, a
    device-side assert or an illegal access breaks the whole process's CUDA context: without
    isolation every later CUDA check of the process then fails at once (``ContextBroken``, naming the
    check that broke it).  So when checking many targets on a GPU from one process, pass
    ``isolate="target"``, as ``graphsafe check`` does by default on the cuda engine and the pytest
    plugin's items always do.

    Raises :class:`~graphsafe.errors.UsageError` / :class:`~graphsafe.errors.ContractError` for bad
    input, :class:`~graphsafe.errors.TargetFailure` subclasses when the target crashed, hung or broke
    its CUDA context.  A target that raises in ``prepare()`` or ``forward()`` is a ``target-error``
    finding in the result.

    Example::

        result = graphsafe.check("flex:fresh_metadata", engine="emulate", examples=20)
        assert result.kinds == {"unpersisted-metadata"}
    """
    resolved = resolve(
        keywords(
            dict(
                spec=spec,
                engine=engine,
                examples=examples,
                steps=steps,
                capture_sizes=capture_sizes,
                probes=probes,
                capture=capture,
                tolerance=tolerance,
                seed=seed,
                device=device,
                database=database,
                report_dir=report_dir,
                isolate=isolate,
                timeout=timeout,
            )
        ),
        "api",
    )
    return run(target, resolved.check, resolved.run)


def audit(
    target: Any,
    options: CheckOptions | None = None,
    *,
    capture: Iterable[str] = AUDIT_CAPTURE,
    report_dir: str | None = None,
    isolate: str | None = None,
    timeout: float | None = None,
    **fields: Any,
) -> AuditResult:
    """Check ``target`` on every batch kind (decode, uniform q = 1 + k, mixed) under every capture policy
    in ``capture``, and compare the highest safe :class:`~graphsafe.Support` level with the declared one.

    ``options`` (or keyword ``fields`` of :class:`~graphsafe.CheckOptions`: ``engine``, ``examples``, ...)
    apply to every cell; without ``options``, each cell draws 20 examples unless ``examples`` says
    otherwise.  ``isolate`` and ``timeout`` apply to each cell's check, as in :func:`check` (in this
    process by default).  With ``report_dir`` the table is written there as ``<target>/audit.md`` and
    ``audit.json``.

    Example::

        r = graphsafe.audit("flex", engine="emulate", examples=20)
        r.safe, r.declared, r.ok
    """
    resolved = resolve(keywords(dict(fields, isolate=isolate, timeout=timeout, report_dir=report_dir)), "audit")
    opts = options.replace(**fields) if options is not None else resolved.check
    cells = RunOptions(isolate=resolved.run.isolate, timeout=resolved.run.timeout)  # findings live in the table
    result = run_audit(
        target, opts, capture=tuple(capture), run_cell=lambda o: run(target, o, cells, label=display_name(target))
    )
    if resolved.run.report_dir is not None:
        write_audit(result, resolved.run.report_dir)
    return result

"""The ``graphsafe`` fixture and ``@pytest.mark.graphsafe(...)``: checks from a project's own tests.

::

    @pytest.mark.graphsafe(examples=100, probes=["stale-pointer", "unpersisted-metadata"])
    def test_my_backend_is_graph_safe(graphsafe):
        graphsafe.check(MyBackend)      # fails the test with the findings; returns the CheckResult otherwise

Inside a test body pytest knows only pass and fail, so a usage or contract error fails the test
too, with a one-line message that says which (``graphsafe: contract error: ...``).
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

import pytest

from ..checker import CheckOptions
from ..errors import ContractError, GraphsafeError, TargetFailure, UsageError
from ..findings import CheckResult
from . import options as o
from .devices import engine_problem
from .inprocess import RunOptions
from .runner import run

__all__ = ["GraphsafeFixture", "failure_text", "failure_line", "error_text", "split_options"]

_CHECK_KEYS = tuple(f.name for f in dataclasses.fields(CheckOptions))
_RUN_KEYS = tuple(f.name for f in dataclasses.fields(RunOptions))


def split_options(params: dict[str, Any]) -> tuple[CheckOptions, RunOptions]:
    """Marker and ``check()`` keywords as the two option objects; a :class:`UsageError` for a typo."""
    for key in params:
        if key not in _CHECK_KEYS + _RUN_KEYS:
            close = difflib.get_close_matches(key, _CHECK_KEYS + _RUN_KEYS, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(_CHECK_KEYS + _RUN_KEYS)}"
            raise UsageError(f"unknown graphsafe option {key!r}{hint}")
    profile = o.profile_name(params.get("profile"))
    check = {k: params[k] for k in _CHECK_KEYS if k in params}
    if check.get("examples") is None:
        check["examples"] = o.default_examples(profile)
    if isinstance(check.get("capture_sizes"), list):
        check["capture_sizes"] = tuple(check["capture_sizes"])
    if check.get("engine") is not None and isinstance(check["engine"], str):
        check["engine"] = o.parse_engine(check["engine"])
    isolate = o.parse_isolate(params.get("isolate") or "none", "isolate")
    timeout = params.get("timeout")
    timeout = o.DEFAULT_TIMEOUT_S if timeout is None else o.parse_timeout(timeout, "timeout")
    return (CheckOptions.build(**check),
            RunOptions(isolate=isolate, timeout=timeout, report_dir=params.get("report_dir"), profile=profile))


def failure_text(result: CheckResult, header: str | None = None) -> str:
    """What a failing test prints: a head line, then each error finding's summary and fix."""
    lines = [header] if header else []
    lines.append(result.header)
    kinds = ", ".join(sorted(result.kinds)) or "ok"
    lines.append(f"{result.target} on {result.engine}: {kinds} "
                 f"({result.examples} examples, {result.steps} steps, {result.seconds:.1f}s)")
    for f in result.errors:
        lines += ["", f.summary(), f"  fix: {f.fix}"]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def failure_line(e: TargetFailure, isolated: bool) -> str:
    """One paragraph for a target that failed to run (crashed, hung, broke its CUDA context)."""
    text = f"graphsafe: {o.one_line(e)}"
    if isolated:
        text += (". It ran in a process of its own: other targets were not affected, and this target's next "
                 "check starts a fresh process")
    return text


def error_text(e: GraphsafeError) -> str:
    """One line for an error: which kind of error, then its message."""
    kind = "contract error" if isinstance(e, ContractError) else "usage error" if isinstance(e, UsageError) else ""
    return f"graphsafe: {kind + ': ' if kind else ''}{o.one_line(e)}"


class GraphsafeFixture:
    """What the ``graphsafe`` fixture returns.

    ``check(target, **kwargs)`` runs a check with the run's defaults (engine, examples, steps,
    report dir, profile), overridden by the test's ``@pytest.mark.graphsafe(...)`` keywords and then
    by ``kwargs`` (any :class:`~graphsafe.checker.CheckOptions` field, plus ``isolate``, ``timeout``,
    ``report_dir`` and ``profile``).  It fails the test with the findings (no traceback) when the
    result is not ok and returns the :class:`graphsafe.CheckResult` otherwise.  ``isolate="target"``
    runs the check in the target's own process; the default, ``"none"``, in the test's process,
    ``timeout`` seconds at most either way.
    """

    def __init__(self, defaults: dict[str, Any]):
        self.defaults = dict(defaults)
        self.results: list[CheckResult] = []

    def check(self, target: Any, **kwargs: Any) -> CheckResult:
        msg = None
        try:
            check, run_opts = split_options({**self.defaults, **kwargs})
            problem = engine_problem(check.engine if isinstance(check.engine, str) else "auto")
            if problem:
                raise UsageError(problem)
            result = run(target, check, run_opts)
        except TargetFailure as e:
            msg = failure_line(e, run_opts.isolate == "target")
        except (UsageError, ContractError) as e:
            msg = error_text(e)
        if msg is not None:  # outside the except block: no chained traceback in the report
            pytest.fail(msg, pytrace=False)
        self.results.append(result)
        if not result.ok:
            pytest.fail(failure_text(result), pytrace=False)
        return result

    def __repr__(self) -> str:
        return f"<graphsafe fixture {self.defaults}>"


def marker_defaults(node: pytest.Item, defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` updated by the node's ``graphsafe`` markers, the closest last."""
    out = dict(defaults)
    for mark in reversed(list(node.iter_markers("graphsafe"))):
        if mark.args:
            pytest.fail("graphsafe: @pytest.mark.graphsafe takes keyword arguments only, "
                        f"e.g. @pytest.mark.graphsafe(examples=20); got {mark.args!r}", pytrace=False)
        out.update(mark.kwargs)
    return out

"""The ``graphsafe`` fixture and ``@pytest.mark.graphsafe(...)``: checks from a project's own tests.

::

    @pytest.mark.graphsafe(examples=100, probes=["stale-pointer", "unpersisted-metadata"])
    def test_my_backend_is_graph_safe(graphsafe):
        graphsafe.check(MyBackend)      # fails the test with the findings; returns the CheckResult otherwise

Inside a test body pytest knows only pass and fail, so a usage or contract error fails the test
too, with a one-line message that says which (``graphsafe: contract error: ...``).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from ..errors import ContractError, GraphsafeError, TargetFailure, UsageError
from ..findings import CheckResult
from . import options as o
from .devices import engine_problem
from .runner import run

__all__ = ["GraphsafeFixture", "failure_headline", "failure_text", "failure_line", "error_text", "marker_given"]


def failure_headline(result: CheckResult) -> str:
    """One line naming each error finding's kind and cause (pytest's short summary shows the first line
    of a failure): ``stale-pointer: buffer:self.lens``, with the place when the cause does not name it:
    ``frozen-host-value: host:attn.py in plan (at _kernel.MAX_SEQ)``."""
    parts = []
    for f in result.errors:
        cause = f.where if f.cause == f"{f.kind.value}:{f.where}" else f.cause  # no cause of its own
        where = f" (at {f.where})" if f.where and f.where not in cause else ""
        parts.append(f"{f.kind.value}: {cause}{where}")
    return "; ".join(parts) or f"{result.target}: ok"


def failure_text(result: CheckResult) -> str:
    """What a failing test prints: a head line naming kinds and causes, what was checked, then each error
    finding's summary and fix."""
    lines = [failure_headline(result), result.header]
    kinds = ", ".join(sorted(result.kinds)) or "ok"
    lines.append(
        f"{result.target} on {result.engine}: {kinds} "
        f"({result.examples} examples, {result.steps} steps, {result.seconds:.1f}s)"
    )
    for f in result.errors:
        lines += ["", f.summary(), f"  fix: {f.fix}"]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def failure_line(e: TargetFailure, isolated: bool) -> str:
    """One paragraph for a target that failed to run (crashed, hung, broke its CUDA context)."""
    text = f"graphsafe: {o.one_line(e)}"
    if isolated:
        text += (
            ". It ran in a process of its own: other targets were not affected, and this target's next "
            "check starts a fresh process"
        )
    return text


def error_text(e: GraphsafeError) -> str:
    """One line for an error: which kind of error, then its message."""
    kind = "contract error" if isinstance(e, ContractError) else "usage error" if isinstance(e, UsageError) else ""
    return f"graphsafe: {kind + ': ' if kind else ''}{o.one_line(e)}"


class GraphsafeFixture:
    """What the ``graphsafe`` fixture returns.

    ``check(target, **kwargs)`` runs a check with the run's options (``--graphsafe-engine``, ini keys,
    ...), overridden by the test's ``@pytest.mark.graphsafe(...)`` keywords and then by ``kwargs``
    (any :class:`~graphsafe.checker.CheckOptions` field, plus ``isolate``, ``timeout``,
    ``report_dir`` and ``profile``), all resolved by :func:`graphsafe.frontend.options.resolve`.
    It fails the test with the findings (no traceback) when the result is not ok and returns the
    :class:`graphsafe.CheckResult` otherwise.  ``isolate="target"`` runs the check in the target's
    own process; the default, ``"none"``, in the test's process, ``timeout`` seconds at most either way.
    """

    def __init__(self, given: dict[str, Any]):
        # Given values as the plugin collects them; plain values count as keywords
        self.given = {k: v if isinstance(v, o.Given) else o.Given(v, f"{k}=") for k, v in given.items()}
        self.results: list[CheckResult] = []

    def check(self, target: Any, **kwargs: Any) -> CheckResult:
        msg = None
        isolated = False
        try:
            resolved = o.resolve({**self.given, **o.keywords(kwargs)}, "fixture")
            isolated = resolved.run.isolate == "target"
            problem = engine_problem(o.engine_name(resolved.check))
            if problem:
                raise UsageError(problem)
            with warnings.catch_warnings():
                # graphsafe's CUDA pre-screen turns on torch's sync debug mode, which warns that it is a prototype
                warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype feature")
                result = run(target, resolved.check, resolved.run)
        except TargetFailure as e:
            msg = failure_line(e, isolated)
        except (UsageError, ContractError) as e:
            msg = error_text(e)
        if msg is not None:  # outside the except block: no chained traceback in the report
            pytest.fail(msg, pytrace=False)
        self.results.append(result)
        if not result.ok:
            pytest.fail(failure_text(result), pytrace=False)
        return result

    def __repr__(self) -> str:
        return f"<graphsafe fixture { ({k: g.value for k, g in self.given.items()}) }>"


def marker_given(node: pytest.Item) -> dict[str, o.Given]:
    """The keywords of the node's ``graphsafe`` markers, the closest last (it wins)."""
    out: dict[str, o.Given] = {}
    for mark in reversed(list(node.iter_markers("graphsafe"))):
        if mark.args:
            pytest.fail(
                "graphsafe: @pytest.mark.graphsafe takes keyword arguments only, "
                f"e.g. @pytest.mark.graphsafe(examples=20); got {mark.args!r}",
                pytrace=False,
            )
        out.update(o.keywords(mark.kwargs, "@pytest.mark.graphsafe({}=...)"))
    return out

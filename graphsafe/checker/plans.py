"""What one Hypothesis example runs: a :class:`Plan`, and how a check splits its examples into phases.

A check runs one phase per capture policy (:mod:`graphsafe.capture.policies`): the graphs of a
phase are captured once and every example of the phase replays on them, except in the ``drawn``
phase, where each example captures one graph with a batch of its own.  Only one phase's graphs
(and target instance) are alive at a time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from .. import strategies as gs
from ..capture.policies import CapturePolicy
from ..contract import Batch, CaptureSpec, Support

__all__ = ["Plan", "Phase", "phases", "session_plans", "drawn_plans"]

#: each policy's share of a check's examples when several are explored
_SHARES = {"worst": 0.5, "minimal": 0.25, "drawn": 0.15, "ascending": 0.1}


@dataclass(frozen=True)
class Plan:
    """Steps to replay; with ``capture``, on a fresh graph of ``size`` captured with that batch."""

    steps: tuple[Batch, ...]
    capture: Batch | None = None
    size: int = 0


@dataclass(frozen=True)
class Phase:
    """One capture policy and the examples the check gives it."""

    policy: CapturePolicy
    examples: int


def phases(policies: Sequence[CapturePolicy], examples: int) -> list[Phase]:
    """The check's phases, in the given order, sharing exactly ``examples`` examples.

    Each policy gets its share (worst case a half, minimal a quarter, drawn and ascending the rest) and
    at least one; with fewer examples than policies, the policies that matter most run (worst, minimal,
    drawn, ascending).
    """
    ranked = sorted(policies, key=lambda p: -_SHARES.get(p.name, 0.5))[:examples]
    weights = {p.name: _SHARES.get(p.name, 0.5) for p in ranked}
    total = sum(weights.values())
    counts = {n: 1 + math.floor((examples - len(ranked)) * w / total) for n, w in weights.items()}
    left = examples - sum(counts.values())
    for n in sorted(weights, key=lambda n: -weights[n])[:left]:  # what rounding left goes to the largest shares
        counts[n] += 1
    return [Phase(p, counts[p.name]) for p in policies if p.name in counts]


def session_plans(
    spec: CaptureSpec, support: Support, sizes: Sequence[int], capture: Batch, max_steps: int
) -> st.SearchStrategy[Plan]:
    """Plans that replay on a session's graphs; ``capture`` is its batch at the largest size.

    Steps avoid the capture's seed, and go past its sequence lengths when it is shorter than the spec's
    longest (a minimal capture): a value right only for the capture's lengths breaks there.
    """
    top = max(sizes)
    main_spec = dataclasses.replace(spec, max_reqs=top, capture_sizes=())
    # Strategies are built once per phase: building them inside draws costs milliseconds an example.
    steps = gs.step_sequences(
        main_spec, support=support, max_steps=max_steps, capture_batch=capture, beyond_capture=True
    )
    return steps.map(lambda s: Plan(tuple(s)))


def drawn_plans(spec: CaptureSpec, support: Support, sizes: Sequence[int], max_steps: int) -> st.SearchStrategy[Plan]:
    """Plans that each capture one graph with a drawn batch, then replay steps that fit it."""
    captures, drawn_steps = {}, {}
    for size in sizes:
        # shared: the steps strategy sees the same capture batch the plan draws
        captures[size] = st.shared(
            gs.capture_batches(spec, support=support, num_slots=size), key=f"graphsafe-capture-{size}"
        )
        sub = dataclasses.replace(spec, max_reqs=size, capture_sizes=())
        drawn_steps[size] = gs.step_sequences(
            sub, support=support, max_steps=max_steps, capture_batch=captures[size], beyond_capture=True
        )
    size_choice = st.sampled_from(sorted(sizes))

    @st.composite
    def plan(draw) -> Plan:
        size = draw(size_choice)
        capture = draw(captures[size])
        return Plan(tuple(draw(drawn_steps[size])), capture, size)

    return plan()

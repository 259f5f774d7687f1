"""What one Hypothesis example runs: a :class:`Plan` (the steps, and the capture they replay on)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from hypothesis import strategies as st

import strategies as gs

from ..capture.session import capture_query_len
from ..contract import CAPTURE_SEED, Batch, CaptureSpec, Support

__all__ = ["Plan", "plans"]


@dataclass(frozen=True)
class Plan:
    """Steps to replay; with ``capture``, on a fresh graph of ``size`` captured with that batch."""

    steps: tuple[Batch, ...]
    capture: Batch | None = None
    size: int = 0


def plans(spec: CaptureSpec, support: Support, sizes: Sequence[int], drawn: bool, max_steps: int) -> st.SearchStrategy[Plan]:
    """Plans on the worst-case capture; with ``drawn``, one example in four captures a drawn batch."""
    q = capture_query_len(support, spec)
    top = max(sizes)
    main_spec = dataclasses.replace(spec, max_reqs=top, capture_sizes=())
    worst = spec.worst_case_batch(top, query_len=q, seed=CAPTURE_SEED)
    # Strategies are built once per check: building them inside draws costs milliseconds an example.
    worst_steps = gs.step_sequences(main_spec, support=support, max_steps=max_steps, capture_batch=worst)
    captures, drawn_steps = {}, {}
    if drawn:
        for size in sizes:
            # shared: the steps strategy sees the same capture batch the plan draws
            captures[size] = st.shared(gs.capture_batches(spec, support=support, num_slots=size),
                                       key=f"graphsafe-capture-{size}")
            sub = dataclasses.replace(spec, max_reqs=size, capture_sizes=())
            drawn_steps[size] = gs.step_sequences(sub, support=support, max_steps=max_steps,
                                                  capture_batch=captures[size], beyond_capture=True)
    size_choice = st.sampled_from(sorted(sizes))

    @st.composite
    def plan(draw) -> Plan:
        # one example in four captures with a drawn batch (a fresh capture each: the costly kind)
        if drawn and draw(st.integers(0, 3)) == 3:
            size = draw(size_choice)
            capture = draw(captures[size])
            steps = draw(drawn_steps[size])
            return Plan(tuple(steps), capture, size)
        return Plan(tuple(draw(worst_steps)))

    return plan()

"""A lazily planned decode (its split schedule planned on first use, in warm-up) whose ``forward()`` also scales the
output by a host value from the batch.

An eager run of the capture batch launches the planner, which the capture does not (the plan was made in warm-up),
so the launch diff against eager has no valid control here.  The re-capture experiment still names the value: a
graph captured for the failing batch replays right and differs from the replayed one in that scalar alone.

* ``LazyPlan``: safe (the reference variant as it is).
* ``LazyPlanHostScale``: buggy: the scale is frozen at capture.  Expected: frozen-host-value.
"""

from __future__ import annotations

from graphsafe import reference

LazyPlan = reference.resolve("flashmla_lazy")


class LazyPlanHostScale(LazyPlan):
    """Buggy: a length normalisation computed on the host from the batch."""

    def prepare(self, batch) -> None:
        super().prepare(batch)
        self.longest = batch.max_seq_len

    def forward(self):
        out = super().forward()
        first = out[0] if isinstance(out, tuple) else out
        first.mul_(64.0 / (64.0 + self.longest))  # BUG: a host value, frozen when the graph is captured
        return out

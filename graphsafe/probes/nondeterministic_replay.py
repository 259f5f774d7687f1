"""nondeterministic-replay: two replays of the same prepared batch differ.

After a step's replay, persistent (static) state is restored and the graph
replays the same prepared batch again; outputs must be bitwise equal.
"""

from __future__ import annotations

from ..findings import Finding, FindingKind

KIND = FindingKind.NONDETERMINISTIC_REPLAY


def run(first, second, compare) -> Finding | None:
    mism = compare(first, second)
    if not mism:
        return None
    m = mism[0]
    return Finding(
        kind=KIND,
        message=f"two replays of one prepared batch differ in {m.tensor}: {m.count}/{m.total} values, max abs {m.max_abs:.3g}",
        where=m.tensor,
        mismatches=mism,
    )

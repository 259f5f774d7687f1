"""What Hypothesis alone costs per example of a check: the same search over the same plans, an empty body.

A check's examples are plans drawn by Hypothesis (:func:`graphsafe.checker.plans.session_plans`, as the
``worst`` phase draws them) and run by its engine; this times that search with a test body that does
nothing, with the settings a check uses (no database, no deadline, no explain phase, seed 0).  What it
prints is a floor under every example of a check on this host, whatever graphsafe and the target do: on
a host-bound GPU loop, the share of a check no change to graphsafe reaches.

    python benchmarks/hypothesis_floor.py [NAME ...] [--examples 200] [--steps 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time

import _util  # noqa: F401
from hypothesis import HealthCheck, Phase, given, seed, settings

from graphsafe import reference
from graphsafe.capture.policies import capture_query_len
from graphsafe.checker import resolve_target
from graphsafe.checker.plans import session_plans
from graphsafe.contract import CAPTURE_SEED


def search(name: str, examples: int, steps: int):
    """An empty-bodied search over ``name``'s plans; returns (run it, steps it drew)."""
    cls, _ = resolve_target(name)
    spec = cls.default_spec
    sizes = spec.default_capture_sizes()
    worst = spec.worst_case_batch(max(sizes), query_len=capture_query_len(cls.support, spec), seed=CAPTURE_SEED)
    drawn = [0]

    @seed(0)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[p for p in settings.default.phases if p != Phase.explain],
        print_blob=False,
    )
    @given(plan=session_plans(spec, cls.support, sizes, worst, steps))
    def run(plan) -> None:
        drawn[0] += len(plan.steps)

    return run, drawn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5, help="timed searches per target; the fastest is kept")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    for name in a.names or reference.FIXED:
        run, drawn = search(name, a.examples, a.steps)
        run()  # the first search builds what later ones reuse
        times = []
        for _ in range(a.rounds):
            drawn[0] = 0
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        row = {
            "variant": name,
            "examples": a.examples,
            "steps": drawn[0],
            "us_per_example": round(1e6 * min(times) / a.examples),
            "rounds_s": [round(x, 4) for x in times],
        }
        rows.append(row)
        print(
            f"{name}: {row['us_per_example']} us an example ({drawn[0]} steps in {a.examples} examples; "
            f"best of {a.rounds} rounds)",
            flush=True,
        )
    _util.write("hypothesis-floor", {"examples": a.examples, "steps": a.steps, "rows": rows}, a.out)


if __name__ == "__main__":
    main()

"""Capture order: the workspace targets captured largest-first and ascending.

    python -m tests.targets.hazards.capture_order

Most engines capture every size largest first, and ``workspace.GrowingWorkspace`` (a workspace
grown lazily to fit the batch being captured) shows its hazard only when sizes are captured
smallest first: graphsafe's ``ascending`` capture policy.  This script shows the mechanism without a
check: it captures both workspace targets with graphsafe's emulator engine in both orders, each size
after ``prepare(worst-case batch)`` and one eager warm-up (as graphsafe does), and prints
``Graph.dead_inputs()`` of every graph: the freed buffers the stale-pointer probe would report.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import torch  # noqa: E402

from graphsafe.engines.emulate import EmulatorEngine  # noqa: E402

from . import workspace  # noqa: E402


def dead_inputs(cls: type, order: tuple[int, ...]) -> dict[int, list[str]]:
    eng = EmulatorEngine("cpu")
    t = cls()
    t.setup(cls.default_spec, eng.device)
    graphs = {}
    with torch.no_grad():
        for size in order:
            t.prepare(cls.default_spec.worst_case_batch(size, seed=7))
            t.forward()  # warm-up
            graphs[size] = eng.capture(t.forward, pool=None)
    return {
        s: [f"{b.dtype} {b.nbytes} B first used at {b.first_use}" for b in g.dead_inputs()] for s, g in graphs.items()
    }


def main() -> None:
    for cls in (workspace.GrowingWorkspace, workspace.FixedWorkspace):
        for order in ((4, 2, 1), (1, 2, 4)):
            print(f"{cls.__name__} captured in order {order}: dead inputs per graph size: {dead_inputs(cls, order)}")


if __name__ == "__main__":
    main()

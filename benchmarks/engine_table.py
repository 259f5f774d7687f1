"""The core tests' synthetic targets on every available engine: finding kind per engine.

python benchmarks/engine_table.py   (prints a markdown table; CUDA column only on a GPU)
"""

from __future__ import annotations

import _util  # noqa: F401
import torch

import graphsafe
from tests.targets import synthetic as S


def main() -> None:
    engines = ["emulate"] + (["cuda"] if torch.cuda.is_available() else [])
    classes = list(S.EXPECTED) + list(S.TWINS)
    rows = []
    for cls in classes:
        kinds = {}
        for e in engines:
            r = graphsafe.check(cls, engine=e, examples=15, database=False, seed=0)
            kinds[e] = ", ".join(sorted(r.kinds)) or "none"
        expected = S.EXPECTED.get(cls, ("none",))[0]
        rows.append({"target": cls.__name__, "expected": expected, **kinds})
        print(rows[-1], flush=True)
    dev = {e: str(graphsafe.engines.get_engine(e).device) for e in engines}
    _util.write("engine-table", {"engines": dev, "rows": rows})
    print("\n| target | expected | " + " | ".join(f"{e} ({dev[e]})" for e in engines) + " |")
    print("|---|---|" + "---|" * len(engines))
    for r in rows:
        print(f"| {r['target']} | {r['expected']} | " + " | ".join(r[e] for e in engines) + " |")


if __name__ == "__main__":
    main()

"""FlashInfer under graphsafe: every FlashInfer target (safe ones first), explored policies, several seeds.

    python3 benchmarks/flashinfer_campaign.py [--examples 200] [--seeds 0 1 2] [--only NAME|safe|buggy ...]
                                              [--library flashinfer|standin] [--report-dir DIR] [--timeout S]
                                              [--out DIR]

Each target is checked on the cuda engine (the emulator with ``--library standin``) under the ``explore``
capture policies, once per seed, in a process of its own (a crash or hang costs that check only).  A
row per target: the wrapper, the expected kinds, the kinds found per seed, examples, seconds, and the
repro scripts of the reports written (``--report-dir``).  Results go to
``benchmarks/results/flashinfer-<engine>-<machine>.json`` with the machine and FlashInfer's version.
On a GPU machine without a package index, carry FlashInfer's wheels over from a connected machine
(docs/how-to/flashinfer.md, "A GPU machine without network").
"""

from __future__ import annotations

import argparse

import _util
from _util import check_one

from graphsafe import flashinfer as fi
from graphsafe.flashinfer.library import load, version

GROUPS = {"safe": fi.SAFE, "buggy": fi.BUGGY}


def classes(library: str) -> dict[str, type]:
    """Registered name -> class; with the stand-in, the test suite's small stand-in classes."""
    if library == "standin":
        from tests.targets.flashinfer_standin import STANDIN  # (the stand-in's small specs live with the tests)

        return dict(STANDIN)
    return {name: fi.resolve(name) for name in fi.names()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="target names; 'safe' or 'buggy' for the documented-usage targets or the buggy variants",
    )
    ap.add_argument("--library", choices=("flashinfer", "standin"), default="flashinfer")
    ap.add_argument("--report-dir", default=None)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--out", default=None, help="directory for the JSON (default: $OUT, else benchmarks/results)")
    a = ap.parse_args()
    only = None if a.only is None else {n for o in a.only for n in GROUPS.get(o, (o,))}
    engine = "emulate" if a.library == "standin" else "cuda"
    lib = load(a.library)
    rows: list[dict] = []

    def save() -> None:  # after every target: a campaign stopped by a time limit keeps what it did
        _util.write(
            f"flashinfer-{engine}",
            {
                "flashinfer": version(lib),
                "library": a.library,
                "engine": engine,
                "seeds": a.seeds,
                "capture": "explore",
                "rows": rows,
            },
            a.out,
        )

    for name, cls in classes(a.library).items():
        if only and name not in only:
            continue
        runs = [check_one(cls, engine, a.examples, seed, a.report_dir, a.timeout) for seed in a.seeds]
        row = {
            "target": name,
            "wrapper": cls.WRAPPER,
            "expected": [cls.expected] if cls.expected else [],
            "found": [r["kinds"] for r in runs],
            "examples": a.examples,
            "seconds": [round(r["seconds"], 2) for r in runs],
            "repro": sorted({f["report"] for r in runs for f in r.get("findings", []) if f.get("report")}),
            "runs": runs,
        }
        row["exact"] = all(set(k) == set(row["expected"]) for k in row["found"])
        rows.append(row)
        print(
            f"{name:40s} expected {row['expected']!s:24s} found {row['found']} "
            f"{'ok' if row['exact'] else 'DIFFERS'} ({sum(row['seconds']):.0f}s)",
            flush=True,
        )
        for r in runs:
            for f in r.get("findings", []):
                print(
                    f"    seed run: {f['kind']} ({f['severity']}, {f['capture_policy']}) at {f['where']}: "
                    f"{f['message'][:300]}",
                    flush=True,
                )
            if "message" in r:
                print(f"    {r['message'][:2000]}", flush=True)
        save()


if __name__ == "__main__":
    main()

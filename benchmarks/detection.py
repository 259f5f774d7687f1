"""Recall and precision of graphsafe on the reference variants and the hazard targets, per engine.

    python benchmarks/detection.py [--engine E] [--suite reference|hazards|all] [--seeds 5] [--examples 50]
                                   [--fixed-examples 200] [--rate-seeds 20] [--only NAME ...]

For every buggy target and seed: the finding kinds.  *Recall*: the expected kind was found in every
seed.  *Precision*: the kinds were exactly the expected set in every seed (no wrong or extra kind).
Over every suite run, and per suite: how many of all error findings are ``replay-mismatch`` (a
difference no probe explained: a symptom, not a cause).
Every safe target (fixed variant, safe twin) is checked with ``--fixed-examples`` examples and must
get no finding.  The hazards that need a capture other than the worst case largest first (a drawn
or minimal capture batch, ascending capture order) also get a seed-to-seed detection rate over
``--rate-seeds`` seeds at ``--examples`` examples.  Results: ``benchmarks/results/detection-<engine>-<machine>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _util  # noqa: F401  (sets up the interpreter before kernels are imported)
import results_tables

import graphsafe
from graphsafe import reference
from tests.targets import hazards


def targets(suite: str) -> list[tuple[str, str, type, frozenset[str]]]:
    """(suite, name, class, expected kinds) for the suite; safe targets expect the empty set."""
    out = []
    if suite in ("reference", "all"):
        for name in reference.names():
            cls = reference.resolve(name)
            out.append(("reference", name, cls, frozenset({cls.expected}) if cls.expected else frozenset()))
    if suite in ("hazards", "all"):
        for cls, kinds in hazards.EXPECTED.items():
            out.append(("hazards", hazards.label(cls), cls, kinds))
        for cls in hazards.SAFE:
            out.append(("hazards", hazards.label(cls), cls, frozenset()))
    return out


def check(cls: type, engine: str, examples: int, seed: int) -> tuple[set[str], list[dict], float]:
    t = time.perf_counter()
    r = graphsafe.check(cls, engine=engine, examples=examples, database=False, seed=seed)
    found = [
        {
            "kind": f.kind.value,
            "where": f.where,
            "message": f.message,
            "capture_policy": f.details.get("capture_policy"),
            "examples_to_find": f.examples_to_find,
        }
        for f in r.errors
    ]
    return set(r.kinds), found, time.perf_counter() - t


def run(a: argparse.Namespace) -> dict:
    eng = graphsafe.engines.get_engine(a.engine)
    meta = {
        "engine": eng.name,
        "suite": a.suite,
        "seeds": a.seeds,
        "examples": a.examples,
        "fixed_examples": a.fixed_examples,
        "rate_seeds": a.rate_seeds,
    }
    rows = []
    capture_dependent = {hazards.label(c) for c in hazards.CAPTURE_DEPENDENT} | {"triton_mla:capture_max_seq_len"}
    for suite, name, cls, expected in targets(a.suite):
        if a.only and name not in a.only:
            continue
        if not expected:
            kinds, found, secs = check(cls, a.engine, a.fixed_examples, 0)
            rows.append(
                {
                    "suite": suite,
                    "target": name,
                    "expected": [],
                    "kinds": sorted(kinds),
                    "ok": not kinds,
                    "found": found,
                    "seconds": round(secs, 2),
                }
            )
        else:
            seeds = a.rate_seeds if name in capture_dependent else a.seeds
            per = []
            for s in range(seeds):
                kinds, found, secs = check(cls, a.engine, a.examples, s)
                per.append({"seed": s, "kinds": sorted(kinds), "found": found, "seconds": round(secs, 2)})
            hit = [p for p in per if expected <= set(p["kinds"])]
            exact = [p for p in per if set(p["kinds"]) == expected]
            steps = [f["examples_to_find"] for p in hit for f in p["found"] if f["kind"] in expected]
            rows.append(
                {
                    "suite": suite,
                    "target": name,
                    "expected": sorted(expected),
                    "capture_dependent": name in capture_dependent,
                    "kinds": sorted({k for p in per for k in p["kinds"]}),
                    "recall": len(hit) / len(per),
                    "precision": len(exact) / len(per),
                    "ok": len(exact) == len(per),
                    "median_examples": statistics.median(steps) if steps else None,
                    "seeds": per,
                }
            )
        row = rows[-1]
        print(
            f"{name:40s} expected={','.join(row['expected']) or 'none':24s} got={','.join(row['kinds']) or 'none':40s} "
            + (
                f"recall={row['recall']:.2f} precision={row['precision']:.2f}" if row["expected"] else f"ok={row['ok']}"
            ),
            flush=True,
        )
        _util.write(f"detection-{eng.name}", {**meta, "rows": rows}, a.out)  # a cut-off run keeps its rows
    return {**meta, "rows": rows, "summary": summary(rows)}


def replay_mismatches(rows: list[dict], suite: str = "reference") -> dict:
    """Per suite run and over all: error findings, and how many of them are ``replay-mismatch`` (rows of an
    older run name no suite: ``suite``, the run's)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        found = [f for p in r["seeds"] for f in p["found"]] if "seeds" in r else r["found"]
        for key in (r.get("suite", suite), "all"):
            c = out.setdefault(key, {"findings": 0, "replay_mismatch": 0})
            c["findings"] += len(found)
            c["replay_mismatch"] += sum(f["kind"] == "replay-mismatch" for f in found)
    return out


def summary(rows: list[dict]) -> dict:
    buggy = [r for r in rows if r["expected"]]
    safe = [r for r in rows if not r["expected"]]
    dep = [r for r in buggy if r.get("capture_dependent")]
    return {
        "replay_mismatch": replay_mismatches(rows),
        "buggy": len(buggy),
        "recall": sum(r["recall"] == 1 for r in buggy),  # targets found in every seed
        "precision": sum(r["precision"] == 1 for r in buggy),  # targets with exactly the expected kinds, every seed
        "safe": len(safe),
        "false_positives": sum(not r["ok"] for r in safe),
        "capture_dependent_rates": {
            r["target"]: f"{round(r['recall'] * len(r['seeds']))}/{len(r['seeds'])}" for r in dep
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--suite", default="all", choices=("reference", "hazards", "all"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--examples", type=int, default=50, help="examples per check (graphsafe's default: 50)")
    ap.add_argument("--fixed-examples", type=int, default=200)
    ap.add_argument("--rate-seeds", type=int, default=20, help="seeds for the capture-dependent hazards")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    data = run(a)
    path = _util.write(f"detection-{data['engine']}", data, a.out)
    print(results_tables.markdown(path))


if __name__ == "__main__":
    main()

"""Examples and seconds to the first finding for every buggy reference variant (median of seeds),
and findings on every fixed variant over many examples.  Also the README's variant x engine table.

    python benchmarks/detection.py [--engine E] [--seeds 5] [--examples 200] [--fixed-examples 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import _util  # noqa: F401  (sets up the interpreter before kernels are imported)

import graphsafe
from graphsafe import reference


def run(engine: str, seeds: int, examples: int, fixed_examples: int, only: list[str] | None, out=None) -> dict:
    rows = []
    eng = graphsafe.engines.get_engine(engine)
    meta = {"engine": eng.name, "seeds": seeds, "examples": examples, "fixed_examples": fixed_examples}
    for name in only or reference.names():
        cls = reference.resolve(name)
        expected = cls.expected
        # compile kernels and capture once, outside the timings ("kernels already compiled")
        graphsafe.check(name, engine=engine, examples=1, database=False, seed=12345, probes=["stale-pointer"])
        if expected is None:
            t = time.perf_counter()
            r = graphsafe.check(name, engine=engine, examples=fixed_examples, database=False, seed=0)
            for o in r.errors:
                print(f"  unexpected on a fixed variant:\n{o.summary()}\n{(o.error or '')[-3000:]}", flush=True)
            rows.append({
                "variant": name, "expected": None, "kinds": sorted(r.kinds), "examples": r.examples,
                "steps": r.steps, "seconds": round(time.perf_counter() - t, 2), "ok": r.ok,
            })
        else:
            per_seed = []
            for s in range(seeds):
                r = graphsafe.check(name, engine=engine, examples=examples, database=False, seed=s)
                f = next((f for f in r.errors if f.kind.value == expected), None)
                # a finding of another kind is a miss to explain: keep what it said
                others = [{"kind": o.kind.value, "message": o.message, "where": o.where,
                           "capture_batch": repr(o.capture_batch) if o.capture_batch is not None else None,
                           "error": (o.error or "")[-3000:]}
                          for o in r.errors if o.kind.value != expected]
                for o in others:
                    print(f"  seed {s}: unexpected {o['kind']}: {o['message']} at {o['where']}\n"
                          f"    capture batch: {o['capture_batch']}\n{o['error']}", flush=True)
                per_seed.append({
                    "seed": s, "kinds": sorted(r.kinds),
                    "examples_to_find": f.examples_to_find if f else None,
                    "seconds_to_find": round(f.seconds_to_find, 3) if f else None,
                    **({"unexpected": others} if others else {}),
                })
            found = [p for p in per_seed if p["examples_to_find"] is not None]
            rows.append({
                "variant": name, "expected": expected,
                "kinds": sorted({k for p in per_seed for k in p["kinds"]}),
                "ok": all(p["kinds"] == [expected] for p in per_seed),
                "median_examples": statistics.median(p["examples_to_find"] for p in found) if found else None,
                "median_seconds": statistics.median(p["seconds_to_find"] for p in found) if found else None,
                "seeds": per_seed,
            })
        row = rows[-1]
        print(f"{name:36s} expected={row['expected']} got={row['kinds']} ok={row['ok']} "
              f"{'median examples=%s seconds=%s' % (row.get('median_examples'), row.get('median_seconds')) if expected else 'examples=%d' % row['examples']}",
              flush=True)
        _util.write(f"detection-{eng.name}", {**meta, "rows": rows}, out)  # after every row: a cut-off run keeps its rows
    return {**meta, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--fixed-examples", type=int, default=2000)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    data = run(a.engine, a.seeds, a.examples, a.fixed_examples, a.only, a.out)
    print("\n| variant | expected | found | median examples to find | median s to find |")
    print("|---|---|---|---|---|")
    for r in data["rows"]:
        found = ", ".join(r["kinds"]) or "none"
        if r["expected"]:
            print(f"| {r['variant']} | {r['expected']} | {found} | {r['median_examples']} | {r['median_seconds']} |")
        else:
            print(f"| {r['variant']} | none | {found} ({r['examples']} examples) | - | - |")


if __name__ == "__main__":
    main()

"""Wall time of the whole reference suite under `pytest -n K --graphsafe all` for several K.

Runs pytest in a fresh process from an empty directory (so only graphsafe's items are collected),
once per worker count, and prints the scaling curve.

    python benchmarks/scaling.py [--workers 1 4 8 16] [--examples 10] [--engine auto]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import _util


def run(workers: int, examples: int, engine: str, targets: list[str], extra: list[str] = ()) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--graphsafe-examples", str(examples), "--graphsafe-engine", engine, "--rootdir", d, d]
        for t in targets:
            cmd += ["--graphsafe", t]
        cmd += ["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]
        cmd += list(extra)
        env = dict(os.environ, PYTHONPATH=str(_util.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
    lines = [l for l in (p.stdout + p.stderr).splitlines() if re.search(r"\d+ (passed|failed)", l)]
    summary = lines[-1].strip("= ") if lines else (p.stdout + p.stderr).strip().splitlines()[-1:]
    counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (passed|failed|error|errors|skipped)", str(summary)))
    return {"workers": workers, "seconds": round(wall, 2), "summary": summary, "counts": counts, "rc": p.returncode}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 4, 8, 16])
    ap.add_argument("--examples", type=int, default=10)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--targets", nargs="*", default=["all"])
    ap.add_argument("--pytest-args", default="", help="more pytest arguments, e.g. '--graphsafe-isolate none'")
    ap.add_argument("--name", default="scaling", help="results file name (default scaling)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    for k in a.workers:
        rows.append(run(k, a.examples, a.engine, a.targets, a.pytest_args.split()))
        print(rows[-1], flush=True)
        base = rows[0]["seconds"]
        for r in rows:
            r["speedup"] = round(base / r["seconds"], 2)
        # after every row: a run cut off by a time limit keeps what it measured
        _util.write(a.name, {"engine": a.engine, "examples": a.examples, "targets": a.targets,
                             "pytest_args": a.pytest_args, "rows": rows}, a.out)
    print("\n| workers | wall s | speedup | outcome |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['workers']} | {r['seconds']} | {r['speedup']}x | {r['summary']} |")


if __name__ == "__main__":
    main()

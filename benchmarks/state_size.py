"""Peak extra memory and wall time of a check against the size of the target's static state.

A synthetic safe target (``tests/targets/paged_kv.py``) holds one KV-cache-shaped static tensor
``[num_blocks, 16, 128]`` fp32 (the size asked for) and per step writes only the batch's tokens into
its blocks (padding goes to the null block 0), then reads them back.  Each size is checked in a
fresh process (``graphsafe.check``, CPU emulator or CUDA, ``--examples`` examples, seed 0), after a
baseline process that checks the same target with the smallest cache the spec allows.  Memory is
the process's peak: resident set size (``resource.getrusage``) and, on CUDA,
``torch.cuda.max_memory_allocated``; ``compare_ms_per_step`` is the time of the per-step comparison
(``Comparator.step``).  Peak RSS of identical processes varies by about 10 MiB, which is more than
the goal's headroom at 8 MiB.

    extra = peak(size) - peak(baseline) - size

``size`` is the graph instance's own cache (the target's memory, not graphsafe's); the eager
instance's copy is one more ``size``, so ``extra / size`` is at least 1.0, and the goal is <= 1.5.

    python benchmarks/state_size.py                       # CPU: 8, 64, 256, 1024 MiB
    python benchmarks/state_size.py --gpu                 # CUDA: 8 MiB .. 8 GiB
    python benchmarks/state_size.py --sizes 8 64 --examples 5 --engine emulate
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import _util
import results_tables
import torch

import graphsafe
from graphsafe.capture.compare import Comparator
from tests.targets.paged_kv import BLOCK_BYTES, PagedKV, spec_for

MiB = 1 << 20
CPU_SIZES = [8, 64, 256, 1024]
GPU_SIZES = [8, 64, 256, 1024, 2048, 4096, 8192]


def child(size_bytes: int, engine: str, examples: int) -> dict:
    """One check in this process; what it measured."""
    spec = spec_for(size_bytes)
    eng = graphsafe.engines.get_engine(engine)
    cuda = eng.device.type == "cuda"
    spent = [0.0]
    step = Comparator.step

    def timed(*args, **kwargs):  # the per-step comparison, where the whole static state was compared
        t0 = time.perf_counter()
        out = step(*args, **kwargs)
        eng.synchronize()
        spent[0] += time.perf_counter() - t0
        return out

    Comparator.step = timed
    t = time.perf_counter()
    r = graphsafe.check(PagedKV, spec=spec, engine=engine, examples=examples, seed=0, database=False, timeout=7200)
    seconds = time.perf_counter() - t
    return {
        "static_bytes": spec.num_blocks * BLOCK_BYTES,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_cuda": torch.cuda.max_memory_allocated() if cuda else None,
        "seconds": round(seconds, 2),
        "examples": r.examples,
        "steps": r.steps,
        "compare_ms_per_step": round(1000 * spent[0] / max(r.steps, 1), 2),
        "kinds": sorted(r.kinds),
        "error": r.findings[0].message if r.findings else None,
        "load_avg_1min": round(os.getloadavg()[0], 2),
    }


def measure(size_bytes: int, engine: str, examples: int) -> dict:
    cmd = [sys.executable, __file__, "--child", str(size_bytes), "--engine", engine, "--examples", str(examples)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = p.stdout.strip().splitlines()
    if p.returncode or not lines:
        return {"static_bytes": size_bytes, "error": f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-800:]}"}
    return json.loads(lines[-1])


def extras(row: dict, base: dict) -> None:
    """Peak memory beyond the baseline process and the graph instance's own cache, as a multiple of it."""
    s = row["static_bytes"]
    for key in ("peak_rss", "peak_cuda"):
        if row.get(key) is not None and base.get(key) is not None:
            extra = row[key] - base[key] - (s - base["static_bytes"])
            row[key.replace("peak", "extra")] = extra
            row[key.replace("peak", "ratio")] = round(extra / s, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="auto", help="auto (cuda with a GPU, else emulate), cuda or emulate")
    ap.add_argument(
        "--sizes", type=int, nargs="*", help="static sizes in MiB (default: 8 64 256 1024; --gpu: up to 8192)"
    )
    ap.add_argument("--gpu", action="store_true", help="GPU sizes, up to 8 GiB")
    ap.add_argument("--examples", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(child(a.child, a.engine, a.examples)), flush=True)
        return
    engine = graphsafe.engines.get_engine(a.engine).name
    sizes = a.sizes or (GPU_SIZES if a.gpu else CPU_SIZES)
    base = measure(0, a.engine, a.examples)
    print("baseline", base, flush=True)
    rows = []
    for mib in sizes:
        row = measure(mib * MiB, a.engine, a.examples)
        if "error" not in row or row.get("kinds") is not None:
            extras(row, base)
        rows.append(row)
        print(row, flush=True)
        # after every row: a run cut off by a time limit keeps what it measured
        path = _util.write(
            f"state-size-{engine}",
            {"engine": engine, "examples": a.examples, "baseline": base, "rows": rows, "goal": "extra <= 1.5 x static"},
            a.out,
        )
    print()
    print(results_tables.markdown(path))


if __name__ == "__main__":
    main()

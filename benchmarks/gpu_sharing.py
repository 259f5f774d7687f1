"""Why pytest workers sharing one GPU scale badly: K processes doing the checker's per-step pattern at once.

Each of K processes captures one CUDA graph of 20 small kernels and then, for ``--seconds``,
replays it and synchronises (what every checked step does: replay, then read results).  A CPU-only
control does the same number of processes running a Python loop of similar grain.  Without MPS a GPU
time-slices between processes' contexts, so if the total replay rate stays flat (or falls) as K grows
while the CPU control scales, one GPU's context switching, not the CPU, is what limits
``pytest -n K`` on one GPU.

    python benchmarks/gpu_sharing.py [--procs 1 2 4 8] [--seconds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

import _util


def _gpu_worker(ready, go, seconds: float, q) -> None:
    import torch

    x = torch.randn(256, device="cuda")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x
        for _ in range(20):
            y = y * 1.0001 + 0.5
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        y = x
        for _ in range(20):
            y = y * 1.0001 + 0.5
    torch.cuda.synchronize()
    ready.put(1)
    go.wait()
    n, end = 0, time.time() + seconds
    while time.time() < end:
        g.replay()
        torch.cuda.synchronize()
        n += 1
    q.put(n)


def _cpu_worker(ready, go, seconds: float, q) -> None:
    ready.put(1)
    go.wait()
    n, end = 0, time.time() + seconds
    while time.time() < end:
        acc = 0
        for i in range(1000):  # Python work of about one replay's duration
            acc += i * i
        n += 1
    q.put(n)


def run(kind: str, procs: int, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    q, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    target = _gpu_worker if kind == "gpu" else _cpu_worker
    ps = [ctx.Process(target=target, args=(ready, go, seconds, q)) for _ in range(procs)]
    for p in ps:
        p.start()
    for _ in ps:  # every child has started (and captured) before any starts counting
        ready.get(timeout=120)
    go.set()
    counts = [q.get(timeout=120) for _ in ps]
    for p in ps:
        p.join()
    total = sum(counts) / seconds
    return {"kind": kind, "procs": procs, "total_per_s": round(total, 1), "per_process_per_s": round(total / procs, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--procs", type=int, nargs="*", default=[1, 2, 4, 8])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    if not _util.torch.cuda.is_available():
        print("no CUDA device: only the CPU control runs")
    for kind in ("gpu", "cpu") if _util.torch.cuda.is_available() else ("cpu",):
        for k in a.procs:
            rows.append(run(kind, k, a.seconds))
            print(rows[-1], flush=True)
    _util.write("gpu-sharing", {"seconds": a.seconds, "rows": rows}, a.out)
    print("\n| loop | processes | total per s | per process per s |")
    print("|---|---|---|---|")
    for r in rows:
        what = "replay 20 kernels + synchronize" if r["kind"] == "gpu" else "CPU-only control"
        print(f"| {what} | {r['procs']} | {r['total_per_s']} | {r['per_process_per_s']} |")


if __name__ == "__main__":
    main()

"""With every ``watch`` and ``opaque_call`` switched off (``GRAPHSAFE_OPAQUE=0``), the graph reader alone must
explain the FlashInfer targets, the deliberate variants, the own-backend example, and targets whose kernels
nobody could wrap (an nvcc extension, cuBLAS called from C++, two FlashInfer layer groups).

    python3 benchmarks/opaque_off.py [--examples 40] [--seed 0] [--timeout 150] [--jobs 1] [--only NAME ...]
                                     [--no-warm-up] [--out DIR]

Each check runs on the cuda engine under the ``explore`` capture policies, in a process of its own.  First a
warm-up (``--no-warm-up`` skips it) builds what the checks would otherwise build inside their timeouts, in
parallel: FlashInfer's JIT modules (a check of each safe FlashInfer target with opaque calls on, two examples)
and the nvcc extension; a machine that built them before loads them from its caches in seconds.  A row per
target: ``expected`` (the target's ``expected`` kind; for the own-backend example, which declares none, what the
same check finds with opaque calls on), ``found`` (the kinds found with them off) and ``names`` (what each
finding names).  ``--jobs`` checks that many targets at once (one GPU serves them all; seconds then overlap), in the order
``--only`` names them (put the slow ones first).
Results: ``benchmarks/results/opaque-off-cuda-gpu.json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import time
import traceback

import _util

import graphsafe
from graphsafe import flashinfer as fi


def targets() -> dict[str, type]:
    out: dict[str, type] = {name: fi.resolve(name) for name in fi.names()}
    sys.path.insert(0, str(_util.ROOT / "examples" / "flashinfer"))
    import my_backend  # the README's own-backend example  # noqa: E402  (path set just above)

    from tests.targets import flashinfer_groups, graph_ext  # (test targets: the repository's, not installed)

    out["my_backend:MyDecode"] = my_backend.MyDecode
    out["my_backend:MyDecodeFixedSplit"] = my_backend.MyDecodeFixedSplit
    for name in ("ExtGatherRebound", "ExtScaleFrozen", "ExtSpinRebound", "ExtAccumulator", "HostTemporary"):
        out[f"graph_ext:{name}"] = getattr(graph_ext, name)
    for name in ("ExtGatherSafe", "ExtScaleSafe", "CublasSafe", "CublasRebound"):
        out[f"graph_ext:{name}"] = getattr(graph_ext, name)
    out["flashinfer_groups:TwoGroups"] = flashinfer_groups.TwoGroups
    out["flashinfer_groups:TwoGroupsSharedIntWorkspace"] = flashinfer_groups.TwoGroupsSharedIntWorkspace
    return out


#: the safe FlashInfer targets whose checks build every JIT module the others use
WARM = ("flashinfer:decode", "flashinfer:decode:tensor_cores", "flashinfer:prefill", "flashinfer:mla")


def warm(name: str) -> tuple[str, float, str]:
    """Build what checking ``name`` needs (a FlashInfer target's JIT modules, or ``ext``: the nvcc extension):
    ``(name, seconds, what went wrong or "")``."""
    t = time.perf_counter()
    try:
        if name == "ext":
            from tests.targets import graph_ext

            graph_ext.ext()
        else:
            graphsafe.check(fi.resolve(name), engine="cuda", examples=2, seed=0, database=False, isolate="none")
    except Exception as e:  # noqa: BLE001 - the checks themselves then say what is wrong
        return name, time.perf_counter() - t, f"{type(e).__name__}: {str(e)[:200]}"
    return name, time.perf_counter() - t, ""


def check(cls: type, examples: int, seed: int, timeout: float, opaque: bool) -> dict:
    os.environ["GRAPHSAFE_OPAQUE"] = "1" if opaque else "0"  # the isolated child inherits it
    t = time.perf_counter()
    try:
        r = graphsafe.check(
            cls, engine="cuda", examples=examples, seed=seed, database=False, isolate="target", timeout=timeout
        )
    except Exception as e:  # noqa: BLE001 - the row says what happened; the run goes on
        msg = e.message if isinstance(e, graphsafe.GraphsafeError) else traceback.format_exc()
        return {"kinds": [f"error:{type(e).__name__}"], "names": [msg[:300]], "seconds": time.perf_counter() - t}
    return {
        "kinds": sorted(r.kinds),
        "names": [f.where for f in r.errors],
        "messages": [f.message[:400] for f in r.findings],
        "infos": [f.kind.value for f in r.findings if f.severity != "error"],
        "notes": r.notes,
        "seconds": round(time.perf_counter() - t, 1),
    }


def row(name: str, examples: int, seed: int, timeout: float) -> dict:
    """One target's row (run in a worker process of its own with ``--jobs``)."""
    cls = targets()[name]
    declared = getattr(cls, "expected", None)
    on = check(cls, examples, seed, timeout, opaque=True) if name.startswith("my_backend:") else None
    off = check(cls, examples, seed, timeout, opaque=False)
    expected = on["kinds"] if on is not None else ([declared] if declared else [])
    out = {"target": name, "expected": expected, "found": off["kinds"], "names": off["names"], "run": off}
    if on is not None:
        out["opaque_on"] = on
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=150.0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--no-warm-up", action="store_true", help="skip building FlashInfer's modules and the extension")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    known = list(targets())
    unknown = [n for n in a.only or () if n not in known]
    if unknown:
        ap.error(f"unknown target(s) {unknown}; known: {known}")
    names = list(dict.fromkeys(a.only)) if a.only else known
    rows: list[dict] = []
    ctx = multiprocessing.get_context("spawn")
    warmed: dict[str, float] = {}
    if not a.no_warm_up:
        t = time.perf_counter()
        with concurrent.futures.ProcessPoolExecutor(max_workers=len(WARM) + 1, mp_context=ctx) as pool:
            for name, seconds, error in pool.map(warm, (*WARM, "ext")):
                warmed[name] = round(seconds, 1)
                print(f"warm-up {name}: {seconds:.1f}s {error}", flush=True)
        print(f"warm-up: {time.perf_counter() - t:.1f}s", flush=True)
    with concurrent.futures.ProcessPoolExecutor(max_workers=a.jobs, mp_context=ctx) as pool:
        futures = {pool.submit(row, n, a.examples, a.seed, a.timeout): n for n in names}
        for fut in concurrent.futures.as_completed(futures):
            r = fut.result()
            rows.append(r)
            rows.sort(key=lambda x: names.index(x["target"]))
            verdict = "ok" if set(r["found"]) == set(r["expected"]) else "DIFFERS"
            print(
                f"{r['target']:48s} expected {r['expected']!s:26s} found {r['found']!s:26s} {verdict} "
                f"({r['run']['seconds']}s)",
                flush=True,
            )
            for n, m in zip(r["names"], r["run"].get("messages", [])):
                print(f"    {n}: {m[:300]}", flush=True)
            _util.write(
                "opaque-off-cuda",
                {
                    "opaque": "GRAPHSAFE_OPAQUE=0",
                    "examples": a.examples,
                    "seed": a.seed,
                    "capture": "explore",
                    "jobs": a.jobs,
                    "timeout": a.timeout,
                    "warm_up_seconds": warmed,
                    "rows": rows,
                },
                a.out,
            )


if __name__ == "__main__":
    main()

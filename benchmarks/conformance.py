"""The emulator against CUDA, op by op: every conformance case's verdict per engine.

    python benchmarks/conformance.py --engine cuda     # on a GPU: CUDA's own verdicts (a real torch.cuda.graph)
                                                       # and graphsafe's CUDA engine's, each case isolated
    python benchmarks/conformance.py --engine emulate  # the CPU emulator, compared with the committed CUDA table
    options: [--only SUBSTRING ...] [--timeout SECONDS] [--out DIR]

The cases are ``tests/targets/conformance`` (each one op or a short idiom inside ``forward()``).  For each:
``capture-failure`` (and the error), ``replays`` (correct for every new input) or ``stale`` (and what
differs).  ``--engine cuda`` writes ``benchmarks/results/conformance-cuda-gpu.json``: ``machine`` and one
entry per case with ``cuda`` (CUDA's verdict) and ``cuda_engine`` (graphsafe's CUDA engine).
``--engine emulate`` writes ``conformance-emulate-cpu.json`` and prints every case where the emulator and
the table disagree, with the listed exceptions (``tests/targets/conformance/limits.py``) apart (exit 1 on a
disagreement).  A run of some cases (``--only``) writes its JSON only where ``--out`` says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import _util

from tests.targets.conformance import CASES, limits, runner

TABLE = _util.RESULTS / "conformance-cuda-gpu.json"


def _selected(only: list[str]) -> list[str]:
    return [n for n in CASES if not only or any(o in n for o in only)]


def _line(name: str, how: str, v: dict) -> str:
    what = (
        v.get("error", "")
        + (": " if v.get("error") else "")
        + (v.get("message") or v.get("differs") or v.get("why") or "")
    )
    return f"{name:58s} {how:12s} {v['verdict']:16s} {what[:110]}"


def _entries(names: list[str], columns: dict[str, dict[str, dict]]) -> list[dict]:
    out = []
    for n in names:
        c = CASES[n]
        out.append(
            {"name": n, "family": c.family, "doc": c.note, **{k: col[n] for k, col in columns.items() if n in col}}
        )
    return out


def _write(name: str, data: dict, out_dir: str | None, partial: bool) -> None:
    if partial and out_dir is None:  # a run of some cases never replaces the whole table
        print(f"{name}: --only ran {data['summary']['cases']} cases; not written (give --out DIR to keep them)")
        return
    _util.write(name, data, out_dir)


def run_cuda(names: list[str], timeout: float, out_dir: str | None, partial: bool = False) -> None:
    from tests.targets.conformance.pool import run_isolated

    items = [(n, how) for n in names for how in ("cuda-engine", "cuda")]
    progress = Path(out_dir or os.environ.get("OUT") or _util.RESULTS) / "conformance-cuda-progress.jsonl"
    progress.parent.mkdir(parents=True, exist_ok=True)
    progress.write_text("")

    def report(item, verdict):  # one line per item as it ends: a run cut short keeps what it measured
        print(_line(item[0], item[1], verdict), flush=True)
        with progress.open("a") as f:
            f.write(json.dumps({"name": item[0], "how": item[1], **verdict}) + "\n")

    t0 = time.perf_counter()
    results, workers = run_isolated(items, timeout=timeout, report=report)
    secs = time.perf_counter() - t0
    cuda = {n: results[(n, "cuda")] for n in names if (n, "cuda") in results}
    eng = {n: results[(n, "cuda-engine")] for n in names if (n, "cuda-engine") in results}
    same = sum(cuda[n]["verdict"] == eng[n]["verdict"] for n in cuda if n in eng)
    summary = {
        "cases": len(names),
        "cuda": dict(Counter(v["verdict"] for v in cuda.values())),
        "cuda_engine": dict(Counter(v["verdict"] for v in eng.values())),
        "cuda_engine_agrees": same,
        "workers": workers,
        "seconds": round(secs, 1),
    }
    print(json.dumps(summary))
    data = {"summary": summary, "cases": _entries(names, {"cuda": cuda, "cuda_engine": eng})}
    _write("conformance-cuda", data, out_dir, partial)


def agreement(emulated: dict[str, dict], table: dict[str, dict]) -> dict:
    """Case by case: ``agree``, ``listed`` (a listed exception that still holds), ``disagree``,
    ``not-compared`` (a side could not run it), and the false findings (CUDA replays, the emulator not)."""
    rows = {}
    for n, v in emulated.items():
        want = table.get(n, {}).get("cuda")
        if want is None or "unavailable" in (want["verdict"], v["verdict"]):
            rows[n] = "not-compared"
        elif n in limits.EXCEPTIONS:
            rows[n] = "listed" if limits.EXCEPTIONS[n].emulator == v["verdict"] else "disagree"
        else:
            rows[n] = "agree" if v["verdict"] == want["verdict"] else "disagree"
    false = [
        n
        for n, v in emulated.items()
        if table.get(n, {}).get("cuda", {}).get("verdict") == "replays" and v["verdict"] != "replays"
    ]
    return {"rows": rows, "counts": dict(Counter(rows.values())), "false_findings": false}


def run_emulate(names: list[str], out_dir: str | None, partial: bool = False) -> int:
    from graphsafe.engines import get_engine

    engine = get_engine("emulate")
    table = {c["name"]: c for c in json.loads(TABLE.read_text())["cases"]} if TABLE.exists() else {}
    t0 = time.perf_counter()
    emulated = {n: runner.run(CASES[n], "emulate", engine) for n in names}
    secs = time.perf_counter() - t0
    agree = agreement(emulated, table)
    for n in names:
        if agree["rows"][n] in ("disagree", "listed"):
            cuda = table[n]["cuda"]["verdict"]
            tag = "LISTED   " if agree["rows"][n] == "listed" else "DISAGREE "
            print(tag + _line(n, f"cuda={cuda}", emulated[n]))
    summary = {
        "cases": len(names),
        "emulate": dict(Counter(v["verdict"] for v in emulated.values())),
        **agree["counts"],
    }
    summary.update(
        {"false_findings": agree["false_findings"], "seconds": round(secs, 1), "table": TABLE.name if table else None}
    )
    print(json.dumps(summary))
    _write(
        "conformance-emulate", {"summary": summary, "cases": _entries(names, {"emulate": emulated})}, out_dir, partial
    )
    return 1 if agree["counts"].get("disagree") or agree["false_findings"] else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=("cuda", "emulate"), required=True)
    p.add_argument("--only", nargs="*", default=[], help="cases whose name contains one of these")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one case may take on the GPU")
    p.add_argument("--out", default=None, help="directory for the JSON (default: $OUT, else benchmarks/results)")
    a = p.parse_args()
    names = _selected(a.only)
    if not names:
        print(f"no case matches {a.only}", file=sys.stderr)
        return 2
    if a.engine == "cuda":
        run_cuda(names, a.timeout, a.out, partial=bool(a.only))
        return 0
    return run_emulate(names, a.out, partial=bool(a.only))


if __name__ == "__main__":
    sys.exit(main())

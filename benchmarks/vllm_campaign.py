"""vLLM's own attention backends under graphsafe: every vLLM target (vLLM's backends first, then the buggy
variants), explored capture policies, several seeds, isolated, vLLM imported once.

    python3 benchmarks/vllm_campaign.py [--examples 200] [--seeds 0 1 2] [--only NAME|safe|buggy ...]
                                        [--library vllm|standin] [--report-dir DIR] [--timeout S]
                                        [--budget S] [--merge FILE] [--out DIR]

Each target is checked on the cuda engine (the emulator with ``--library standin``) under the ``explore``
capture policies, once per seed, in a sandbox process of its own.  Every sandbox forks from one fork
server that imported vLLM once (the targets' ``preload``), and a target's seeds share its sandbox, so
vLLM's import (17-25 s) and each kernel's compilation are paid once per run, not once per check.  A row
per target and vLLM release: the expected kinds, the kinds found per seed, examples, seconds, the repro
scripts of the reports written (``--report-dir``).  ``--budget``: seconds after which no further check
starts (those rows say ``not run``).  Results go to ``benchmarks/results/vllm-<engine>-<machine>.json``;
``--merge FILE`` adds this run's rows to FILE's (another release's run).
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import metadata
from pathlib import Path

import _util
from _util import check_one

from graphsafe import vllm as gv
from graphsafe.frontend.devices import worker_device
from graphsafe.frontend.sandbox import get_sandbox, warm

GROUPS = {"safe": gv.SAFE, "buggy": gv.BUGGY}


def classes(library: str) -> dict[str, type]:
    """Registered name -> class; with the stand-in, the test suite's stand-in classes."""
    if library == "standin":
        from tests.targets.vllm_standin import STANDIN  # (the stand-in classes live with the tests)

        return dict(STANDIN)
    return {name: gv.resolve(name) for name in gv.names()}


def release(library: str) -> str:
    """vLLM's version, from its package metadata (importing vLLM here would cost seconds for nothing)."""
    if library == "standin":
        from graphsafe.vllm import standin

        return standin.__version__
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--only", nargs="*", default=None, help="target names; 'safe' or 'buggy' for either group")
    ap.add_argument("--library", choices=("vllm", "standin"), default="vllm")
    ap.add_argument("--report-dir", default=None)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--capture", default="explore", help="capture policies (default explore; 'worst' is vLLM's own)")
    ap.add_argument("--budget", type=float, default=None, help="seconds after which no further check starts")
    ap.add_argument("--merge", default=None, help="a results JSON of another run whose rows to keep")
    ap.add_argument("--out", default=None, help="directory for the JSON (default: $OUT, else benchmarks/results)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    engine = "emulate" if a.library == "standin" else "cuda"
    if a.library == "vllm":  # the fork server imports vLLM while this process gets going
        warm(engine, preload=gv.VllmTarget.preload)
    only = None if a.only is None else {n for o in a.only for n in GROUPS.get(o, (o,))}
    version = release(a.library)
    kept = json.loads(Path(a.merge).read_text()) if a.merge else {}
    rows: list[dict] = list(kept.get("rows", []))
    versions = sorted(set(kept.get("vllm", [])) | {version})

    def save() -> None:  # after every target: a campaign stopped by a time limit keeps what it did
        _util.write(
            f"vllm-{engine}",
            {
                "vllm": versions,
                "library": a.library,
                "engine": engine,
                "seeds": a.seeds,
                "capture": a.capture,
                "rows": rows,
            },
            a.out,
        )

    for name, cls in classes(a.library).items():
        if only and name not in only:
            continue
        runs = []
        for seed in a.seeds:
            if a.budget is not None and time.perf_counter() - t0 > a.budget:
                runs.append({"kinds": ["not run"], "message": f"the campaign's {a.budget:g} s budget was spent"})
            else:
                runs.append(check_one(cls, engine, a.examples, seed, a.report_dir, a.timeout, a.capture))
        box = get_sandbox(cls, engine=engine, device=worker_device(engine))
        row = {
            "target": name,
            "vllm": version,
            "expected": [cls.expected] if cls.expected else [],
            "found": [r["kinds"] for r in runs],
            "examples": a.examples,
            "seconds": [round(r.get("seconds", 0.0), 2) for r in runs],
            "support": next((r["support"] for r in runs if "support" in r), None),
            "twin": gv.TWIN_OF.get(name),
            "repro": sorted({f["report"] for r in runs for f in r.get("findings", []) if f.get("report")}),
            "sandbox_startups": box.startups,
            "runs": runs,
        }
        row["exact"] = all(set(k) == set(row["expected"]) for k in row["found"])
        rows.append(row)
        print(
            f"{name:42s} vllm {version} expected {row['expected']!s:24s} found {row['found']} "
            f"{'ok' if row['exact'] else 'DIFFERS'} ({sum(row['seconds']):.0f}s; startups {box.startups})",
            flush=True,
        )
        for r in runs:
            for f in r.get("findings", []):
                print(
                    f"    {f['kind']} ({f['severity']}, {f['capture_policy']}) at {f['where']}: {f['message'][:300]}",
                    flush=True,
                )
            if "message" in r:
                print(f"    {r['message'][:2000]}", flush=True)
        save()
    print(f"campaign wall time {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()

"""Survey: what graphsafe reports for every hazard target, against what it should report.

    python -m tests.targets.hazards.survey [--examples N] [--seeds S] [--only NAME[,NAME]] [--jobs J]

Runs ``graphsafe.check(cls, engine="emulate", examples=N, database=False, seed=s)`` for every
buggy target (``EXPECTED``) and safe twin (``SAFE``) and each seed, then prints a table
(target | expected | kinds found per seed | verdict), the first line of every finding's
message, and the disagreements: missed bugs, wrong or extra kinds, findings on safe twins.
``--seeds 3`` means seeds 0, 1, 2; ``--seeds 0,5`` lists them.  With ``--jobs J`` each
target runs in a child process, J at a time (``--timeout`` seconds each).
"""

from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # graphsafe from this checkout, not another install

from graphsafe.engines.triton_env import use_interpreter  # noqa: E402

use_interpreter()

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import graphsafe  # noqa: E402

from . import EXPECTED, SAFE, TWIN_OF, label  # noqa: E402


def all_targets() -> list[type]:
    return list(EXPECTED) + list(SAFE)


def find(name: str) -> type:
    for cls in all_targets():
        if name in (cls.__name__, label(cls), f"{cls.__module__}:{cls.__name__}"):
            return cls
    raise SystemExit(f"unknown target {name!r}; known: {', '.join(c.__name__ for c in all_targets())}")


def first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def run_one(cls: type, seed: int, examples: int) -> dict:
    t0 = time.perf_counter()
    try:
        r = graphsafe.check(cls, engine="emulate", examples=examples, database=False, seed=seed, timeout=7200)
    except Exception as e:  # noqa: BLE001 - a crash of the checker is a result too
        return {
            "seed": seed,
            "error": f"{type(e).__name__}: {first_line(str(e))}",
            "trace": traceback.format_exc()[-2000:],
            "seconds": time.perf_counter() - t0,
        }
    findings = [
        {
            "kind": str(f.kind),
            "severity": f.severity,
            "message": first_line(f.message),
            "where": f.where,
            "drawn_capture": bool(f.details.get("drawn_capture")),
            "capture_size": f.capture_size,
            "steps": [b.short() for b in (f.batches or [])],
        }
        for f in r.findings
    ]
    return {
        "seed": seed,
        "kinds": sorted({f["kind"] for f in findings if f["severity"] == "error"}),
        "findings": findings,
        "examples": r.examples,
        "calls": getattr(r, "calls", None),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def survey_target(cls: type, seeds: list[int], examples: int) -> dict:
    return {"target": label(cls), "runs": [run_one(cls, s, examples) for s in seeds]}


def expected_of(cls: type) -> frozenset[str]:
    return EXPECTED.get(cls, frozenset())


def verdict(cls: type, runs: list[dict]) -> tuple[str, list[str]]:
    """('ok' | 'DISAGREE', notes) over all seeds."""
    exp = expected_of(cls)
    notes = []
    for run in runs:
        s = run["seed"]
        if "error" in run:
            notes.append(f"seed {s}: check() raised {run['error']}")
            continue
        if run.get("timeout"):
            notes.append(f"seed {s}: timed out")
            continue
        found = set(run["kinds"])
        if cls in SAFE:
            if found:
                notes.append(f"seed {s}: false positive {sorted(found)}")
            continue
        if not found:
            notes.append(f"seed {s}: missed (no finding in {run['examples']} examples)")
            continue
        missing, extra = exp - found, found - exp
        if missing and extra:
            notes.append(f"seed {s}: wrong kind {sorted(found)} instead of {sorted(exp)}")
        elif extra:
            notes.append(f"seed {s}: extra kinds {sorted(extra)} besides {sorted(exp & found)}")
        elif missing:
            notes.append(f"seed {s}: missing {sorted(missing)}")
    return ("ok" if not notes else "DISAGREE"), notes


def render(results: list[dict], seeds: list[int], examples: int, header: str) -> str:
    by_label = {label(c): c for c in all_targets()}
    out = [header, ""]
    cols = ["target", "expected"] + [f"seed {s}" for s in seeds] + ["verdict"]
    out.append("| " + " | ".join(cols) + " |")
    out.append("|" + "---|" * len(cols))
    notes_all = []
    for res in results:
        cls = by_label[res["target"]]
        exp = ", ".join(sorted(expected_of(cls))) or "none"
        cells = []
        for run in res["runs"]:
            if "error" in run:
                cells.append("CHECK RAISED")
            elif run.get("timeout"):
                cells.append("TIMEOUT")
            else:
                cells.append((", ".join(run["kinds"]) or "none") + f" ({run['examples']} ex, {run['seconds']:.0f}s)")
        v, notes = verdict(cls, res["runs"])
        twin = f" (twin {TWIN_OF[cls].__name__})" if cls in TWIN_OF else (" (safe)" if cls in SAFE else "")
        out.append(f"| {res['target']}{twin} | {exp} | " + " | ".join(cells) + f" | {v} |")
        notes_all += [f"- {res['target']}: {n}" for n in notes]
    out += ["", "## Finding messages (first line; per seed)", ""]
    for res in results:
        out.append(f"### {res['target']}")
        for run in res["runs"]:
            if "error" in run:
                out.append(f"- seed {run['seed']}: check() raised {run['error']}")
                continue
            if run.get("timeout"):
                out.append(f"- seed {run['seed']}: timed out")
                continue
            if not run["findings"]:
                out.append(f"- seed {run['seed']}: no finding ({run['examples']} examples, {run['seconds']}s)")
            for f in run["findings"]:
                where = "drawn capture" if f["drawn_capture"] else "worst-case capture"
                out.append(
                    f"- seed {run['seed']}: {f['kind']} [{f['severity']}, {where}, size {f['capture_size']}, "
                    f"steps {f['steps']}]: {f['message']}"
                )
        out.append("")
    out += ["## Disagreements", ""] + (notes_all or ["none"])
    return "\n".join(out)


def parse_seeds(text: str) -> list[int]:
    if "," in text:
        return [int(x) for x in text.split(",") if x.strip()]
    return list(range(int(text)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=30)
    ap.add_argument("--seeds", default="3", help="a count (3 -> 0,1,2) or a comma list")
    ap.add_argument("--only", default="", help="comma-separated target names")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per target (with --jobs)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help="also write the table to this file")
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    targets = [find(n) for n in args.only.split(",") if n] if args.only else all_targets()

    if args.child:  # one JSON line per target
        import torch

        torch.set_num_threads(1)
        for cls in targets:
            print("SURVEY " + json.dumps(survey_target(cls, seeds, args.examples)), flush=True)
        return 0

    t0 = time.perf_counter()
    results: list[dict] = []
    if args.jobs <= 1:
        for cls in targets:
            res = survey_target(cls, seeds, args.examples)
            results.append(res)
            print(
                f"# {res['target']}: "
                + "; ".join(",".join(r.get("kinds", [])) or r.get("error", "none") for r in res["runs"]),
                file=sys.stderr,
                flush=True,
            )
    else:
        pending = list(targets)
        running: list[tuple[type, subprocess.Popen, float]] = []
        done: dict[str, dict] = {}
        env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        while pending or running:
            while pending and len(running) < args.jobs:
                cls = pending.pop(0)
                cmd = [
                    sys.executable,
                    "-m",
                    "tests.targets.hazards.survey",
                    "--child",
                    "--only",
                    cls.__name__,
                    "--examples",
                    str(args.examples),
                    "--seeds",
                    ",".join(map(str, seeds)) + ",",
                ]
                p = subprocess.Popen(cmd, cwd=_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                running.append((cls, p, time.perf_counter()))
            time.sleep(1.0)
            for item in list(running):
                cls, p, started = item
                if p.poll() is None and time.perf_counter() - started < args.timeout:
                    continue
                if p.poll() is None:
                    p.kill()
                    p.wait()
                    res = {"target": label(cls), "runs": [{"seed": s, "timeout": True} for s in seeds]}
                else:
                    out, err = p.communicate()
                    lines = [ln for ln in out.splitlines() if ln.startswith("SURVEY ")]
                    if lines:
                        res = json.loads(lines[-1][len("SURVEY ") :])
                    else:
                        msg = first_line(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
                        res = {
                            "target": label(cls),
                            "runs": [{"seed": s, "error": f"child failed: {msg}"} for s in seeds],
                        }
                running.remove(item)
                done[label(cls)] = res
                print(
                    f"# {res['target']} done after {time.perf_counter() - started:.0f}s: "
                    + "; ".join(
                        ",".join(r.get("kinds", [])) or ("TIMEOUT" if r.get("timeout") else r.get("error", "none"))
                        for r in res["runs"]
                    ),
                    file=sys.stderr,
                    flush=True,
                )
        results = [done[label(c)] for c in targets]

    import torch
    import triton

    header = (
        f"# graphsafe hazard survey: engine emulate, {args.examples} examples per check, seeds {seeds}\n"
        f"graphsafe {graphsafe.__file__}, torch {torch.__version__}, triton {triton.__version__}, "
        f"total {time.perf_counter() - t0:.0f}s"
    )
    text = render(results, seeds, args.examples, header)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

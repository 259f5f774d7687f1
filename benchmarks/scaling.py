"""Wall time of the whole reference suite under `pytest -n K --graphsafe all` for several K.

For each K, pytest runs in a fresh process from a directory with no tests (so only graphsafe's
items are collected), with a junit XML report from which come each target's duration and worker and
each worker's sandbox start-ups (the plugin records them in the items' properties), and with
``timeline_plugin`` (this folder), whose timeline splits the wall time into phases
(:func:`suite_timeline.phases`: the controller's start, the workers' start, collection and the wait for
the first sandbox, the items, the end).  ``over_busiest_s`` is the wall time less the busiest worker's
busy time: what more workers cannot divide.  The runs share
that directory's pytest cache, so a run after the first orders its items by the durations the
earlier ones recorded, as a repeated run does (``--no-history``: no cache, the order by kind).
Hypothesis runs under graphsafe's ``ci`` profile (derandomised: every K does the same work; the
example count is ``--examples``, 10 by default as in the default ``fast`` profile).

Before that, the start-up of one sandbox child (Sandbox.start until the child is ready) is measured
here: spawned cold, and forked from the fork server (its first child pays for starting the server);
then a warm-up run (one example per target, the most workers, its own directory) that is not
counted: Triton's kernel cache and the file cache are then as warm for the first measured run as
for the last.

With ``--cli`` the same K are ``graphsafe check TARGETS --jobs K`` instead: one process, one fork server,
K checks at once (each thread of the command keeps one GPU); each target's seconds and GPU come from its
progress line, and a GPU's busy time is the sum of its targets' seconds.

    python benchmarks/scaling.py [--workers 1 2] [--examples 10] [--engine auto] [--startups 3]
                                 [--warmup-examples 1] [--profile ci] [--no-history] [--cli]

Writes benchmarks/results/<name>-<cpu|gpu>.json (``--name``, default scaling) after every row and
prints the tables.  The goal: with k GPUs, ``-n k`` at least 0.85 k times as fast as ``-n 1``; on one
GPU, ``-n 2`` no slower than ``-n 1``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import _util
import suite_timeline


def run(
    workers: int, examples: int, engine: str, targets: list[str], extra: list[str], root: str, history: bool = True
) -> dict:
    """One ``pytest -n workers`` run in ``root`` (its pytest cache kept between runs when ``history``)."""
    junit = os.path.join(root, f"junit-{workers}.xml")
    shutil.rmtree(os.path.join(root, ".hypothesis"), ignore_errors=True)  # no examples saved by an earlier run
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:randomly",
        "--graphsafe-examples",
        str(examples),
        "--graphsafe-engine",
        engine,
        "--rootdir",
        root,
        root,
        "-n",
        str(workers),
        "--junitxml",
        junit,
    ]
    cmd += [] if history else ["-p", "no:cacheprovider"]
    for t in targets:
        cmd += ["--graphsafe", t]
    cmd += list(extra)
    timeline = os.path.join(root, f"timeline-{workers}.txt")
    with contextlib.suppress(FileNotFoundError):
        os.remove(timeline)
    cmd += ["-p", "timeline_plugin"]
    path = os.pathsep.join(
        [str(_util.ROOT), os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")]
    )
    env = dict(os.environ, PYTHONPATH=path, GRAPHSAFE_TIMELINE=timeline)
    load = os.getloadavg()[0]  # other work on the machine stretches every wall time here
    env["GRAPHSAFE_TIMELINE_T0"] = repr(time.time())
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    items = parse_junit(junit) if os.path.exists(junit) else {}
    workers_busy = per_worker(items)
    try:
        split = suite_timeline.phases(open(timeline).read().splitlines())
    except (OSError, ValueError) as e:  # a run that ended before its first item
        split = {"error": f"{type(e).__name__}: {e}"}
    lines = [l for l in (p.stdout + p.stderr).splitlines() if re.search(r"\d+ (passed|failed|error)", l)]
    summary = lines[-1].strip("= ") if lines else (p.stdout + p.stderr).strip().splitlines()[-1:]
    counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (passed|failed|error|errors|skipped)", str(summary)))
    return {
        "workers": workers,
        "seconds": round(wall, 2),
        "summary": summary,
        "counts": counts,
        "rc": p.returncode,
        "load_before_after": [round(load, 2), round(os.getloadavg()[0], 2)],
        "phases": split,
        "over_busiest_s": round(wall - max((w["busy_s"] for w in workers_busy.values()), default=0.0), 2),
        "targets": items,
        "per_worker": workers_busy,
    }


def run_cli(jobs: int, examples: int, engine: str, targets: list[str], profile: str, root: str) -> dict:
    """One ``graphsafe check TARGETS --jobs jobs`` run in ``root``."""
    cmd = [sys.executable, "-m", "graphsafe", "check", *targets, "--engine", engine, "--examples", str(examples)]
    cmd += ["--profile", profile, "--isolate", "--jobs", str(jobs)]
    env = dict(os.environ, PYTHONPATH=str(_util.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load = os.getloadavg()[0]
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    items = {}
    pattern = r"^\[\d+/\d+\] (\S+)(?: \(GPU (\d+)\))?(?::| \.\.\.) ([^()]*?) \((\d+\.\d)s\)$"
    for m in re.finditer(pattern, p.stderr, re.M):
        slot = f"gpu{m.group(2)}" if m.group(2) is not None else "main"
        items[m.group(1)] = {"seconds": float(m.group(4)), "worker": slot, "outcome": m.group(3), "startups": []}
    busy = per_worker(items)
    return {
        "workers": jobs,
        "seconds": round(wall, 2),
        "summary": f"exit {p.returncode}, {len(items)} targets",
        "counts": {},
        "rc": p.returncode,
        "load_before_after": [round(load, 2), round(os.getloadavg()[0], 2)],
        "over_busiest_s": round(wall - max((w["busy_s"] for w in busy.values()), default=0.0), 2),
        "targets": items,
        "per_worker": busy,
        "stderr_tail": p.stderr[-600:] if p.returncode not in (0, 1) else "",
    }


def parse_junit(path: str) -> dict:
    """target -> {seconds, worker, outcome, startups} from the plugin's junit XML properties."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        m = re.fullmatch(r"graphsafe\[(.+)\]", case.get("name", ""))
        if not m:
            continue
        props = {}
        for prop in case.iter("property"):
            props.setdefault(prop.get("name"), prop.get("value"))  # each phase's report repeats them
        outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        out[m.group(1)] = {
            "seconds": round(float(case.get("time", 0)), 2),
            "worker": props.get("graphsafe_worker"),
            "outcome": outcome,
            "startups": json.loads(props.get("graphsafe_startups") or "[]"),
        }
    return out


def per_worker(items: dict) -> dict:
    """worker -> items, busy seconds, and its sandbox start-ups: the slowest paid for starting the fork
    server (it need not be the first item's: the next item's child is started before an item runs)."""
    out: dict[str, dict] = {}
    for it in items.values():
        w = out.setdefault(it["worker"] or "?", {"items": 0, "busy_s": 0.0, "startups": []})
        w["items"] += 1
        w["busy_s"] = round(w["busy_s"] + it["seconds"], 2)
        w["startups"] += it["startups"]
    for w in out.values():
        secs = sorted(s["seconds"] for s in w["startups"])
        w["slowest_startup_s"] = secs[-1] if secs else None
        w["other_startups_median_s"] = round(statistics.median(secs[:-1]), 3) if len(secs) > 1 else None
        w["methods"] = sorted({s["method"] for s in w["startups"]})
    return dict(sorted(out.items()))


def startups(engine: str, n: int, target: str = "flex") -> dict:
    """Seconds from Sandbox.start to ready: spawned cold, and from the fork server (first, then warm)."""
    from graphsafe.frontend.sandbox import Sandbox  # after _util set the engine up

    out = {}
    for method in ("spawn", "auto"):
        secs, how = [], set()
        for _ in range(n + (1 if method == "auto" else 0)):
            box = Sandbox(target, engine=engine, method=method)
            try:
                box.start(wait=True)
                secs.append(box.startups[-1]["seconds"])
                how.add(box.startups[-1]["method"])
            finally:
                box.close()
        name = "forkserver" if how == {"forkserver"} else "/".join(sorted(how))
        warm = secs[1:] if method == "auto" else secs
        out[name] = {"first_s": secs[0], "median_s": round(statistics.median(warm), 3), "all_s": secs}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--examples", type=int, default=10)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--targets", nargs="*", default=["all"])
    ap.add_argument("--startups", type=int, default=3, help="sandbox start-ups per method (0: skip)")
    ap.add_argument("--warmup-examples", type=int, default=1, help="examples per target of the warm-up run (0: none)")
    ap.add_argument("--profile", default="ci", help="graphsafe's Hypothesis profile (default ci: derandomised)")
    ap.add_argument("--no-history", action="store_true", help="no pytest cache: every run orders its items by kind")
    ap.add_argument("--pytest-args", default="", help="more pytest arguments, e.g. '--graphsafe-isolate none'")
    ap.add_argument("--name", default="scaling", help="results file name (default scaling)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--cli", action="store_true", help="measure 'graphsafe check --jobs K' instead of pytest -n K")
    ap.add_argument("--tables", metavar="JSON", help="only print the tables of an earlier results file")
    a = ap.parse_args()
    if a.tables:
        return print_tables(json.loads(open(a.tables).read()))
    extra = ["--graphsafe-profile", a.profile, *a.pytest_args.split()]
    data = {
        "engine": a.engine,
        "examples": a.examples,
        "profile": a.profile,
        "history": not a.no_history,
        "targets": a.targets,
        "pytest_args": a.pytest_args,
        "front": "cli" if a.cli else "pytest",
        "startup": startups(a.engine, a.startups) if a.startups else {},
        "rows": [],
    }
    print("start-up:", data["startup"], flush=True)
    if a.warmup_examples and not a.cli:
        with tempfile.TemporaryDirectory() as d:
            warmup = run(max(a.workers), a.warmup_examples, a.engine, a.targets, extra, d, history=False)
        data["warmup"] = {k: v for k, v in warmup.items() if k not in ("targets", "per_worker")}
        print("warm-up:", data["warmup"], flush=True)
    root = tempfile.mkdtemp(prefix="graphsafe-scaling-")
    for k in a.workers:
        if a.cli:
            data["rows"].append(run_cli(k, a.examples, a.engine, a.targets, a.profile, root))
        else:
            data["rows"].append(run(k, a.examples, a.engine, a.targets, extra, root, history=not a.no_history))
        print({k: v for k, v in data["rows"][-1].items() if k not in ("targets", "per_worker")}, flush=True)
        base = next((r for r in data["rows"] if r["workers"] == 1), data["rows"][0])
        for r in data["rows"]:
            r["speedup"] = round(base["seconds"] / r["seconds"], 2)
            r["efficiency"] = round(r["speedup"] / r["workers"], 2)
        _util.write(a.name, data, a.out)  # after every row: a run cut off by a time limit keeps what it measured
    shutil.rmtree(root, ignore_errors=True)
    print_tables(data)


def print_tables(data: dict) -> None:
    rows = data["rows"]
    print(
        "\n| workers | wall s | speed-up | speed-up / workers | wall less busiest worker s | outcome |"
        "\n|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['workers']} | {r['seconds']} | {r['speedup']}x | {r['efficiency']} | {r.get('over_busiest_s', '-')} "
            f"| {r['summary']} |"
        )
    names = ("controller_s", "workers_s", "first_item_s", "items_s", "end_s", "items_sum_s")
    print("\n| workers | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for r in rows:
        split = r.get("phases") or {}
        print(f"| {r['workers']} | " + " | ".join(str(split.get(n, "-")) for n in names) + " |")
    print(
        "\n| workers | worker | items | busy s | slowest start-up s (the fork server's) | other start-ups, median s "
        "| how |\n|---|---|---|---|---|---|---|"
    )
    for r in rows:
        for w, s in per_worker(r["targets"]).items():
            print(
                f"| {r['workers']} | {w} | {s['items']} | {s['busy_s']} | {s['slowest_startup_s']} | "
                f"{s['other_startups_median_s']} | {', '.join(s['methods'])} |"
            )
    targets = list(rows[0]["targets"]) if rows else []
    print(
        "\n| target (as the first run reported them) | "
        + " | ".join(f"s at -n {r['workers']} (worker)" for r in rows)
        + " |"
    )
    print("|---|" + "---|" * len(rows))
    for t in targets:
        cells = [
            f"{r['targets'][t]['seconds']} ({r['targets'][t]['worker']})" if t in r["targets"] else "-" for r in rows
        ]
        print(f"| {t} | " + " | ".join(cells) + " |")
    if data.get("startup"):
        print("\n| sandbox start-up | first s | median s (later) |\n|---|---|---|")
        for how, s in data["startup"].items():
            print(f"| {how} | {s['first_s']} | {s['median_s']} |")


if __name__ == "__main__":
    main()

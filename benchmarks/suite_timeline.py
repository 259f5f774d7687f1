"""Where the wall time of ``pytest -n K --graphsafe all`` goes, phase by phase.

Runs the reference suite (default isolation) ``--runs`` times with :mod:`timeline_plugin` and
splits each run's wall time into

* ``controller_s``: pytest's own process until its ``pytest_configure`` (interpreter, plugins; without
  xdist graphsafe's configure imports torch; xdist's controller imports it only once its workers are
  spawned, alongside their start);
* ``workers_s``: from there until the last xdist worker's ``pytest_configure`` (each worker imports
  the plugin, and torch; its fork server is started before that, in the plugin's first hook);
* ``first_item_s``: from there until the first item starts (collection, and the wait for the fork
  server to import torch, torch._dynamo, triton and graphsafe before it forks the first child);
* ``items_s``: first item start to last item end (the part that more GPUs divide);
* ``end_s``: the rest (workers shutting down, the controller's summary).

``items_sum_s`` adds every item's own duration (what one worker would run).  ``--parse FILE...``
reads timelines written earlier (lines ``TL <t> <who> <event> [nodeid]``) instead of running.

    python benchmarks/suite_timeline.py [--workers 1] [--examples 10] [--runs 2] [--engine auto] [--targets all]
    python benchmarks/suite_timeline.py --parse run1.txt run2.txt
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _util

HERE = Path(__file__).resolve().parent


def phases(lines: list[str]) -> dict:
    """The phase split of one run's ``TL`` lines (see the module docstring)."""
    ev = []
    for line in lines:  # a line may follow pytest's progress dots when a log mixed the two streams
        m = re.search(r"TL +(\S+) (\S+) (\S+)(?: (\S+))?", line)
        if m:
            ev.append((float(m.group(1)), m.group(2), m.group(3), m.group(4) or ""))
    ctl_conf = min(t for t, who, e, _ in ev if who == "ctl" and e == "configure")
    worker_conf = [t for t, who, e, _ in ev if who != "ctl" and e == "configure"]
    starts = {n: t for t, who, e, n in ev if who != "ctl" and e == "start"}
    ends = {n: t for t, who, e, n in ev if who != "ctl" and e == "end"}
    if not worker_conf:  # no xdist: the controller runs the items
        starts = {n: t for t, who, e, n in ev if e == "start"}
        ends = {n: t for t, who, e, n in ev if e == "end"}
    last_conf = max(worker_conf, default=ctl_conf)
    first, last = min(starts.values()), max(ends.values())
    stop = max(t for t, who, e, _ in ev if who == "ctl" and e == "unconfigure")
    r = lambda x: round(x, 2)  # noqa: E731
    return {
        "wall_s": r(stop),
        "controller_s": r(ctl_conf),
        "workers_s": r(last_conf - ctl_conf),
        "first_item_s": r(first - last_conf),
        "items_s": r(last - first),
        "end_s": r(stop - last),
        "items_sum_s": r(sum(ends[n] - starts[n] for n in ends if n in starts)),
        "items": len(ends),
    }


def run_once(workers: int, examples: int, engine: str, targets: list[str]) -> tuple[list[str], str]:
    with tempfile.TemporaryDirectory() as root:
        tl = os.path.join(root, "timeline.txt")
        env = dict(
            os.environ,
            GRAPHSAFE_TIMELINE=tl,
            GRAPHSAFE_TIMELINE_T0=repr(time.time()),
            PYTHONPATH=os.pathsep.join([str(HERE), str(_util.ROOT), os.environ.get("PYTHONPATH", "")]),
        )
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "timeline_plugin",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            root,
            root,
            *[a for t in targets for a in ("--graphsafe", t)],
            "--graphsafe-examples",
            str(examples),
            "--graphsafe-engine",
            engine,
            "-n",
            str(workers),
        ]
        p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        summary = [line.strip("= ") for line in p.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
        return Path(tl).read_text().splitlines(), summary[-1] if summary else f"exit {p.returncode}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--examples", type=int, default=10)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--targets", nargs="*", default=["all"], help="targets to check (default all)")
    ap.add_argument("--parse", nargs="*", metavar="FILE", help="timelines written earlier (no run)")
    ap.add_argument("--name", default=None, help="results file name (default suite-timeline-<engine>)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    if a.parse:
        for path in a.parse:
            rows.append({"source": os.path.basename(path), **phases(Path(path).read_text().splitlines())})
    else:
        for i in range(a.runs):
            lines, summary = run_once(a.workers, a.examples, a.engine, a.targets)
            rows.append({"run": i, "summary": summary, **phases(lines)})
    for row in rows:
        print(row, flush=True)
    if not a.parse or a.out:
        _util.write(
            a.name or f"suite-timeline-{a.engine}",
            {"workers": a.workers, "examples": a.examples, "engine": a.engine, "targets": a.targets, "rows": rows},
            a.out,
        )


if __name__ == "__main__":
    main()

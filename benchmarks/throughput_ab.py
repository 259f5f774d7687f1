"""Throughput of this tree against another checkout of graphsafe (a baseline), round by round, on the same host.

    python benchmarks/throughput_ab.py --baseline DIR [--label TEXT] [--engine E] [--only NAME ...] [--rounds 12]
                                       [--examples 200] [--steps 4] [--out DIR] [--merge]

``throughput.py`` measures one tree.  On a shared host the bare loop's speed drifts (on an H200 host it measured
556 and 1086 steps/s within minutes), so two trees measured one after the other differ by the host's moment as
much as by their code.  Here each tree runs in a process of its own, with its own ``graphsafe`` and its own
``benchmarks/throughput.py`` (its bare loop and its checks, as that file measures them), compiled and warmed once;
then the rounds alternate between the two processes (ABBA), each round being the bare loop, the ``worst``-policy
check and the default policies' check, back to back.  A round's ratio is its check's steps per second over its
bare loop's; per tree the row gives the median of its rounds' ratios, and the median over pairs of rounds (round
``i`` of each tree, seconds apart) of this tree's ratio minus the baseline's: the figure least moved by the host.

The baseline needs a ``benchmarks/throughput.py`` with ``draw_plans``, ``bare_loop``, ``through_graphsafe`` and
``warm_up`` of today's signatures (every release since the benchmark was added).  One variant at a time runs; with
several ``--only`` names, each gets its own pair of processes.
Two processes of one tree differ too (where the host places them): measured against a copy of itself, a tree's
paired difference came out between -0.03 and +0.07 over six rounds, so a difference inside that is not the code's.
Results: ``throughput-ab-<engine>-<machine>.json``, one entry of ``runs`` per invocation (``--label`` says what the
baseline is; ``--merge`` adds this run to the file's earlier ones).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(tree: str, name: str, engine: str, examples: int, steps: int) -> None:
    """One tree's side: its own graphsafe and throughput.py; after warming up, one round per ``round`` line read."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # this file's folder: not the tree's
    sys.path[:0] = [str(Path(tree) / "benchmarks"), tree]
    os.chdir(tree)
    import throughput as T  # the tree's own (its _util puts the tree first on sys.path)

    import graphsafe

    eng = T.get_engine(engine)
    cls, _ = T.resolve_target(name)
    spec = cls.default_spec
    plans = T.draw_plans(spec, cls.support, examples, steps)
    T.bare_loop(cls, spec, eng, plans)  # compile
    T.warm_up(name, eng.name, examples, steps, "full")
    print(json.dumps({"ready": True, "graphsafe": graphsafe.__file__, "engine": eng.name}), flush=True)
    for line in sys.stdin:
        if line.strip() != "round":
            break
        bn, bs, bad = T.bare_loop(cls, spec, eng, plans)
        gn, gs, gok = T.through_graphsafe(name, eng.name, examples, steps, capture=("worst",))
        dn, ds, dok = T.through_graphsafe(name, eng.name, examples, steps)
        print(
            json.dumps({"bare": [bn, bs, bad], "worst": [gn, gs, gok], "default": [dn, ds, dok]}),
            flush=True,
        )


class Side:
    """A worker process for one tree."""

    def __init__(self, label: str, tree: Path, a: argparse.Namespace, name: str):
        self.label, self.tree = label, tree
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), "--only", name]
        cmd += ["--engine", a.engine, "--examples", str(a.examples), "--steps", str(a.steps)]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
        self.ready: dict = {}

    def read(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise SystemExit(
            f"{self.label} ({self.tree}): the worker ended (exit {self.proc.wait()}); its errors are above"
        )

    def round(self) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write("round\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()


def ratios(rounds: list[dict], key: str) -> list[float]:
    """Each round's ``key`` check (steps per second) over its bare loop's."""
    return [(r[key][0] / r[key][1]) / (r["bare"][0] / r["bare"][1]) for r in rounds]


def row(name: str, sides: dict[str, list[dict]]) -> dict:
    out: dict = {"variant": name}
    for key in ("worst", "default"):
        mine, base = ratios(sides["this"], key), ratios(sides["baseline"], key)
        out[key] = {
            "this_median": round(statistics.median(mine), 3),
            "baseline_median": round(statistics.median(base), 3),
            "paired_difference_median": round(statistics.median(m - b for m, b in zip(mine, base)), 3),
            "this_rounds": [round(x, 3) for x in mine],
            "baseline_rounds": [round(x, 3) for x in base],
        }
    out["bare_steps_per_s"] = {k: [round(r["bare"][0] / r["bare"][1], 1) for r in v] for k, v in sides.items()}
    out["ok"] = all(r["worst"][2] and r["default"][2] for v in sides.values() for r in v)
    return out


def merged(earlier: dict | None, data: dict) -> dict:
    """``data``'s run after ``earlier``'s runs, where both measured the same engine, examples and steps (a row of
    another setting would not compare); ``ValueError`` saying which setting differs otherwise."""
    if not earlier:
        return data
    for key in ("engine", "examples", "steps"):
        if earlier.get(key) != data[key]:
            raise ValueError(
                f"--merge: the result file there measured {key}={earlier.get(key)!r}, this run {data[key]!r}; "
                "write this run to another --out folder"
            )
    return {**data, "runs": [*earlier.get("runs", []), *data["runs"]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="the root of another graphsafe checkout")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--rounds", type=int, default=12, help="rounds per tree, alternating (default 12)")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", default=None)
    ap.add_argument("--label", default=None, help="what the baseline is, for the table (default: its folder's name)")
    ap.add_argument("--merge", action="store_true", help="add this run to the runs of the result file already there")
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.only[0], a.engine, a.examples, a.steps)
        return
    if not a.baseline or not (Path(a.baseline) / "benchmarks" / "throughput.py").is_file():
        ap.error("--baseline must be the root of a graphsafe checkout (with benchmarks/throughput.py)")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    sys.path.insert(0, str(HERE))
    import _util

    from graphsafe import reference

    trees = {"this": _util.ROOT, "baseline": Path(a.baseline).resolve()}
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    earlier: dict | None = None  # the result file's earlier runs (--merge), read at the first variant
    rows = []
    for name in a.only or reference.FIXED:
        sides = {label: Side(label, tree, a, name) for label, tree in trees.items()}
        with concurrent.futures.ThreadPoolExecutor(len(sides)) as pool:  # both warm up at once
            ready = dict(zip(sides, pool.map(Side.read, sides.values())))
        for label, tree in trees.items():
            if not Path(ready[label]["graphsafe"]).resolve().is_relative_to(tree):
                raise SystemExit(
                    f"the {label} worker imported graphsafe from {ready[label]['graphsafe']}, not from {tree}: an "
                    "installed graphsafe shadows the tree (run from a virtual environment without it, or install "
                    "neither tree)"
                )
        settings = {"engine": ready["this"]["engine"], "examples": a.examples, "steps": a.steps}
        if earlier is None:  # --merge: the file's runs so far, checked before any round (the engine known now)
            path = _util.result_path(f"throughput-ab-{settings['engine']}", a.out)
            there = json.loads(path.read_text()) if a.merge and path.exists() else {}
            try:
                earlier = merged(there, {**settings, "runs": []})
            except ValueError as e:
                raise SystemExit(str(e)) from None
        done: dict[str, list[dict]] = {label: [] for label in sides}
        for i in range(a.rounds):
            for label in ("this", "baseline") if i % 2 == 0 else ("baseline", "this"):
                done[label].append(sides[label].round())
        for s in sides.values():
            s.close()
        r = row(name, done)
        r["graphsafe"] = {label: ready[label]["graphsafe"] for label in sides}
        rows.append(r)
        w, d = r["worst"], r["default"]
        print(
            f"{name}: worst {w['this_median']} here, {w['baseline_median']} baseline, paired difference "
            f"{w['paired_difference_median']:+}; default {d['this_median']} / {d['baseline_median']}, "
            f"{d['paired_difference_median']:+}",
            flush=True,
        )
        this_run = {
            "label": a.label or trees["baseline"].name,
            "baseline": str(trees["baseline"]),
            "rounds": a.rounds,
            "when": started,
            "rows": rows,
        }
        _util.write(f"throughput-ab-{settings['engine']}", merged(earlier, {**settings, "runs": [this_run]}), a.out)


if __name__ == "__main__":
    main()

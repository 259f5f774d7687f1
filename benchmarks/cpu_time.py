"""Time to a verdict on the CPU emulator: this tree's ``graphsafe check`` against a base commit's, in one run.

Checks out ``--base`` (default c12b30e) into a temporary git worktree, then runs the same command in
both trees, alternating (base, this tree, then this tree, base, ...), each in a process of its own
with the same Python (and so the same torch, triton and hypothesis) and a fresh empty example
database::

    python -m graphsafe check NAMES --engine emulate --examples 20 --seed 0 --expected

NAMES are the reference variants other than ``mla_indexer``'s three (at c12b30e ``mla_indexer``'s
kernel fails under triton 3.9's interpreter).  Each run's wall time and each target's verdict (the
finding kinds) are recorded; the script fails when a target's verdict differs between the trees.
The temporary worktree is removed afterwards.  Results: ``benchmarks/results/cpu-time-cpu.json``.

    python benchmarks/cpu_time.py [--base c12b30e] [--rounds 1] [--examples 20] [--seed 0] [--only NAME...]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _util

ROOT = _util.ROOT
_ROW = re.compile(r"^\[(\d+)/(\d+)\] (\S+) \.\.\. (.*) \(([\d.]+)s\)$")


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def reference_names() -> list[str]:
    """The reference variants (``graphsafe list``'s first group; the FlashInfer targets it lists after them
    are not in the base commit), without mla_indexer's."""
    from graphsafe import reference

    return [name for name in reference.names() if not name.startswith("mla_indexer")]


def _env(tree: Path, db: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), GRAPHSAFE_DB=db)
    env.pop("CI", None)  # the same Hypothesis settings on both sides, whatever the caller's shell says
    return env


def imported_from(tree: Path) -> str:
    """Where ``graphsafe`` is imported from when run in ``tree`` (must be ``tree`` itself)."""
    return subprocess.run(
        [sys.executable, "-c", "import graphsafe; print(graphsafe.__file__)"],
        cwd=tree,
        env=_env(tree, tempfile.gettempdir()),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def run_check(tree: Path, names: list[str], examples: int, seed: int) -> dict:
    """One ``graphsafe check`` over ``names`` in ``tree``: wall seconds, verdicts, per-target seconds."""
    with tempfile.TemporaryDirectory(prefix="graphsafe-db-") as db:
        cmd = [
            sys.executable,
            "-m",
            "graphsafe",
            "check",
            *names,
            "--engine",
            "emulate",
            "--examples",
            str(examples),
            "--seed",
            str(seed),
            "--expected",
        ]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, cwd=tree, env=_env(tree, db), capture_output=True, text=True)
        wall = time.perf_counter() - t0
    verdicts, seconds = {}, {}
    for line in p.stderr.splitlines():
        m = _ROW.match(line.strip())
        if m:
            verdicts[m.group(3)] = m.group(4)
            seconds[m.group(3)] = float(m.group(5))
    summary = next((line for line in p.stdout.splitlines() if " as expected" in line), "")
    if set(verdicts) != set(names):
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"{tree}: no verdict for {sorted(set(names) - set(verdicts))} (exit {p.returncode})")
    return {
        "wall_seconds": round(wall, 2),
        "exit": p.returncode,
        "expected": summary.strip(),
        "verdicts": verdicts,
        "target_seconds": seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="c12b30e")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each tree (alternating order)")
    ap.add_argument("--examples", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", help="targets (default: the reference variants but mla_indexer's)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    names = a.only or reference_names()
    head = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    base = _git("rev-parse", a.base)
    tmp = Path(tempfile.mkdtemp(prefix="graphsafe-base-"))
    tree = tmp / "tree"
    _git("worktree", "add", "--detach", str(tree), base)
    try:
        trees = {"base": tree, "head": ROOT}
        for side, t in trees.items():
            where = imported_from(t)
            if not where.startswith(str(t)):
                raise SystemExit(f"{side}: graphsafe imports from {where}, not from {t}")
        runs: dict[str, list[dict]] = {"base": [], "head": []}
        for r in range(a.rounds):
            for side in ("base", "head") if r % 2 == 0 else ("head", "base"):
                res = run_check(trees[side], names, a.examples, a.seed)
                runs[side].append(res)
                print(f"round {r + 1} {side}: {res['wall_seconds']} s, {res['expected']}", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)
        subprocess.run(["rm", "-rf", str(tmp)])
    differ = {
        n: {side: runs[side][i]["verdicts"][n] for side in runs}
        for i in range(a.rounds)
        for n in names
        if runs["base"][i]["verdicts"][n] != runs["head"][i]["verdicts"][n]
    }
    base_s = round(statistics.median(x["wall_seconds"] for x in runs["base"]), 2)
    head_s = round(statistics.median(x["wall_seconds"] for x in runs["head"]), 2)
    data = {
        "command": f"python -m graphsafe check NAMES --engine emulate --examples {a.examples} --seed {a.seed} --expected",
        "names": names,
        "base_commit": base,
        "head_commit": head,
        "head_dirty": dirty,
        "rounds": a.rounds,
        "base_seconds": base_s,
        "head_seconds": head_s,
        "ratio": round(head_s / base_s, 3),
        "same_verdicts": not differ,
        "differing_verdicts": differ,
        "runs": runs,
    }
    _util.write("cpu-time", data, a.out)
    print(
        f"\nbase {base[:7]}: {base_s} s; this tree {head[:7]}{'+' if dirty else ''}: {head_s} s; "
        f"ratio {data['ratio']}; verdicts {'the same' if not differ else 'DIFFER: ' + repr(differ)}"
    )
    for n in names:
        print(
            f"  {n:36s} base {runs['base'][0]['target_seconds'][n]:7.1f}s  head {runs['head'][0]['target_seconds'][n]:7.1f}s"
            f"  {runs['head'][0]['verdicts'][n]}"
        )
    if differ:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

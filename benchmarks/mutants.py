"""Hazard-mutation benchmark: graphsafe's verdicts on mutants of its safe targets, against a ground truth of its own.

    python benchmarks/mutants.py [--engine emulate|cuda] [--library standin|real] [--only PATTERN ...]
                                 [--examples 20] [--seeds 0 1] [--jobs 1] [--timeout 600] [--per-op 1]
                                 [--sequences 4] [--steps 5] [--isolate target|none] [--out DIR] [--list]

Subjects (:mod:`mutation.subjects`): the fixed reference variants and the safe FlashInfer and vLLM targets (on
their CPU stand-ins unless ``--library real``).  Operators (:mod:`mutation.operators`) make each mutant as a
subclass at run time; each declares the finding kind it is expected to cause (``None``: equivalent by design).
Ground truth (:mod:`mutation.truth`): replay against a fresh eager instance per step over fixed step sequences,
without graphsafe's diagnosis: ``real`` when any step differs, else ``equivalent``.  Then
``graphsafe.check(mutant, engine=E, examples=N, seed=S)`` per seed, each in a subprocess with a timeout, the check
itself isolated in a sandbox process on cuda (:mod:`mutation.live` names each mutant so that it imports back;
``--isolate`` chooses).

Per mutant: ``detected`` (a real mutant got an error finding in every seed), ``right_kind`` (a real mutant's
findings are exactly the expected kind in every seed), ``false_on_equivalent`` (an equivalent mutant got any
error finding in some seed).  The unmutated subjects run too, as controls (they must be equivalent and clean).
``--only`` keeps mutants whose id (``subject|operator|buffer``) contains one of the patterns (``fnmatch`` when a
pattern has ``*``).  Results: ``benchmarks/results/mutants-<engine>-<machine>.json``, rewritten after every mutant.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _util
from mutation import live, operators, subjects, truth

HERE = Path(__file__).resolve()


def _engine(name: str):
    from graphsafe.engines import get_engine

    return get_engine(name)


# -- workers (run in a subprocess each) ----------------------------------------------------------------------------
def worker(a: argparse.Namespace) -> dict:
    if a.worker == "oracle":
        eng = _engine(a.engine)
        return {
            name: {"expected": expected, **truth.ground_truth(cls, eng, sequences=a.sequences, steps=a.steps)}
            for name, cls, expected in subjects.registered_variants(a.library)
        }
    if a.worker == "profiles":
        eng = _engine(a.engine)
        return {n: subjects.profile(n, subjects.subject_class(n, a.library), eng).to_dict() for n in a.subjects}
    profiles = json.loads(Path(a.profiles).read_text())
    cls, _, _ = live.mutant(a.mutant, profiles, a.library)
    if a.worker == "truth":
        return truth.ground_truth(cls, _engine(a.engine), sequences=a.sequences, steps=a.steps, seed=0)
    import graphsafe

    # every capture policy, as the ground truth replays under each (an engine's own backend would otherwise be
    # checked under its engine's capture alone)
    if a.isolate == "target":  # a sandbox child imports the mutant back (mutation.live) from what it inherits
        os.environ.update({live.PROFILES_ENV: str(Path(a.profiles).resolve()), live.LIBRARY_ENV: a.library})
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH")) if p)
        cls = live.importable(cls, a.mutant)
    r = graphsafe.check(
        cls,
        engine=a.engine,
        examples=a.examples,
        seed=a.seed,
        database=False,
        capture="explore",
        isolate=a.isolate,
        timeout=max(a.timeout - 15, 10),  # the sandbox stops the check before this worker is killed
    )
    errors = r.errors
    return {
        "kinds": sorted(r.kinds),
        "findings": [
            {"kind": f.kind.value, "where": f.where, "message": f.message[:400], "seconds_to_find": f.seconds_to_find}
            for f in errors
        ],
        "examples": r.examples,
        "seconds": r.seconds,
        "seconds_to_first": min((f.seconds_to_find for f in errors), default=None),
    }


def _run(args: list[str], timeout: float) -> dict:
    """A worker's JSON answer; a timeout or a crash is an answer too (``error``)."""
    cmd = [sys.executable, str(HERE), *args]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "timeout", "wall": time.perf_counter() - t}
    wall = time.perf_counter() - t
    lines = [x for x in p.stdout.splitlines() if x.startswith("@@")]
    if p.returncode != 0 or not lines:
        return {"error": f"exit {p.returncode}", "stderr": p.stderr[-2000:], "wall": wall}
    return {**json.loads(lines[-1][2:]), "wall": wall}


# -- the campaign --------------------------------------------------------------------------------------------------
def _selected(mid: str, only: list[str] | None) -> bool:
    if not only:
        return True
    return any(fnmatch.fnmatch(mid, p) if "*" in p else p in mid for p in only)


def _judge(row: dict) -> None:
    """``detected``, ``right_kind`` and ``false_on_equivalent`` from the row's truth and per-seed kinds."""
    if row["operator"] == "rebind_fresh":  # its kind follows from the ground truth's experiment
        row["expected"] = operators.by_name("rebind_fresh").expected_for(None, row["truth"])
    per_seed = [{f"error:{c['error']}"} if "error" in c else set(c["kinds"]) for c in row["checks"]]
    found = [sorted(k) for k in per_seed]
    row["found"] = found
    real = row["truth"].get("truth") == "real"
    kinds_ok = [k and not any(x.startswith("error:") for x in k) for k in per_seed]
    row["detected"] = real and all(kinds_ok)
    row["right_kind"] = real and row["expected"] is not None and all(k == {row["expected"]} for k in per_seed)
    row["false_on_equivalent"] = (not real) and any(bool(k) for k in per_seed)


def summary(rows: list[dict]) -> dict:
    scored = [r for r in rows if r["operator"] != "identity" and r["truth"].get("truth") in ("real", "equivalent")]
    real = [r for r in scored if r["truth"]["truth"] == "real"]
    equivalent = [r for r in scored if r["truth"]["truth"] == "equivalent"]
    controls = [r for r in rows if r["operator"] == "identity"]
    return {
        "mutants": len(scored),
        "real": len(real),
        "detected": sum(r["detected"] for r in real),
        "right_kind": sum(r["right_kind"] for r in real),
        "equivalent": len(equivalent),
        "false_on_equivalent": sum(r["false_on_equivalent"] for r in equivalent),
        "real_from_equivalent_operators": [r["id"] for r in real if r["expected"] is None],
        "equivalent_from_hazard_operators": len([r for r in equivalent if r["expected"] is not None]),
        "no_truth": [r["id"] for r in rows if r["truth"].get("truth") not in ("real", "equivalent")],
        "controls": len(controls),
        "controls_clean": sum(
            r["truth"].get("truth") == "equivalent" and not r["false_on_equivalent"] for r in controls
        ),
        "misses": [
            {"mutant": r["id"], "expected": r["expected"], "found": r["found"]} for r in real if not r["right_kind"]
        ],
        "false_findings": [
            {"mutant": r["id"], "found": r["found"]} for r in equivalent + controls if r["false_on_equivalent"]
        ],
    }


def _machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    m = _util.machine()
    return {**m, "model": m.get("gpu") or model, "cpu_model": model, "cores": os.cpu_count(), "date": m["when"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="emulate", choices=("emulate", "cuda"))
    ap.add_argument("--library", default="standin", choices=("standin", "real"))
    ap.add_argument(
        "--isolate",
        choices=("target", "none"),
        help="check each mutant in a sandbox process (a replay that never ends is stopped there and its cause "
        "decided in a fresh process; on a GPU a runaway kernel slows every job) or in the worker's own process; "
        "default: target on cuda, none on the emulator (a sandbox costs 5-10 s a check on a 2-core host)",
    )
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--examples", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per check (and per ground truth)")
    ap.add_argument("--per-op", type=int, default=1, help="buffers per per-buffer operator and subject")
    ap.add_argument("--sequences", type=int, default=2, help="step sequences per capture policy")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--out", default=None, help="directory for the JSON (default: $OUT, else benchmarks/results)")
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument(
        "--oracle",
        action="store_true",
        help="first run the ground truth on graphsafe's own buggy variants and safe targets (each must come out "
        "real or equivalent as registered) and keep it in the result file",
    )
    ap.add_argument(
        "--merge", action="store_true", help="keep the rows of other mutants from the result file already there"
    )
    ap.add_argument("--resume", action="store_true", help="--merge, and skip the mutants whose rows are there already")
    ap.add_argument(
        "--rejudge", action="store_true", help="score the result file's rows again (after a change of the rules)"
    )
    ap.add_argument("--worker", choices=("profiles", "truth", "check", "oracle"), help=argparse.SUPPRESS)
    ap.add_argument("--mutant", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--profiles", help=argparse.SUPPRESS)
    ap.add_argument("--subjects", nargs="*", default=list(subjects.SUBJECTS), help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.isolate = a.isolate or ("target" if a.engine == "cuda" else "none")
    if a.worker:
        try:
            out = worker(a)
        except Exception:  # noqa: BLE001 - the parent records what went wrong
            traceback.print_exc()
            sys.exit(3)
        print("@@" + json.dumps(out), flush=True)
        return

    if a.rejudge:
        path = _util.result_path(f"mutants-{a.engine}", a.out)
        data = json.loads(path.read_text())
        for r in data["rows"]:
            _judge(r)
        data["summary"] = summary(data["rows"])
        path.write_text(json.dumps(data, indent=1))
        print(json.dumps(data["summary"], indent=1))
        return
    common = ["--engine", a.engine, "--library", a.library, "--isolate", a.isolate, "--timeout", str(a.timeout)]
    wanted = [s for s in subjects.SUBJECTS if _selected(s, a.only) or any(p.split("|")[0] in s for p in a.only or ())]
    prof = _run([*common, "--worker", "profiles", "--subjects", *wanted], a.timeout)
    if "error" in prof:
        sys.exit(f"profiling the subjects failed: {prof}")
    prof.pop("wall")
    pfile = Path(tempfile.mkdtemp(prefix="mutants-")) / "profiles.json"
    pfile.write_text(json.dumps(prof))
    plan: list[dict] = []
    for s in wanted:
        p = subjects.Profile.from_dict(prof[s])
        cands = [(f"{s}|identity", None, None), *operators.mutants_of(p, a.per_op)]
        for mid, op, buf in cands:
            if _selected(mid, a.only):
                plan.append(
                    {
                        "id": mid,
                        "subject": s,
                        "operator": op.name if op else "identity",
                        "buffer": buf.path if buf else None,
                        "expected": op.expected_for(buf) if op else None,
                        "doc": op.doc if op else "the subject itself (a control)",
                    }
                )
    if a.list:
        for r in plan:
            print(f"{r['id']:70s} {r['expected'] or '(equivalent)'}")
        return
    command = "python benchmarks/mutants.py " + " ".join(sys.argv[1:])
    meta = {
        "engine": a.engine,
        "library": a.library,
        "command": command,
        "examples": a.examples,
        "seeds": a.seeds,
        "truth": {"sequences": a.sequences, "steps": a.steps, "seed": 0},
        "operators": {o.name: {"expected": o.expected, "scope": o.scope, "doc": o.doc} for o in operators.OPERATORS},
    }
    if a.oracle:
        oracle = _run([*common, "--worker", "oracle", "--sequences", str(a.sequences), "--steps", str(a.steps)], 3600)
        oracle.pop("wall", None)
        meta["oracle"] = oracle
        wrong = [
            n for n, r in oracle.items() if isinstance(r, dict) and (r.get("truth") == "real") != bool(r["expected"])
        ]
        print(f"oracle: {len(oracle) - len(wrong)} of {len(oracle)} registered targets as registered; wrong: {wrong}")
    rows: list[dict] = []
    t_all = time.perf_counter()
    path = _util.result_path(f"mutants-{a.engine}", a.out)
    ids = [p["id"] for p in plan]
    kept: list[dict] = []
    if (a.merge or a.resume) and path.exists():
        before = json.loads(path.read_text())
        if a.resume:
            done = {r["id"] for r in before["rows"]}
            plan = [r for r in plan if r["id"] not in done]
        rerun = {p["id"] for p in plan}
        kept = [r for r in before["rows"] if r["id"] not in rerun]
        if "oracle" in before and "oracle" not in meta:
            meta["oracle"] = before["oracle"]
        meta["command"] = "; ".join(filter(None, [before.get("command"), command]))
        meta["wall_s_before"] = before.get("wall_s", 0) + before.get("wall_s_before", 0)

    def save() -> None:
        ordered = kept + sorted(rows, key=lambda r: ids.index(r["id"]))
        data = {**meta, "machine": _machine(), "wall_s": time.perf_counter() - t_all, "rows": ordered}
        data["summary"] = summary(ordered)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))

    def one(r: dict) -> dict:
        w = [*common, "--profiles", str(pfile), "--mutant", r["id"]]
        r["truth"] = _run(
            [*w, "--worker", "truth", "--sequences", str(a.sequences), "--steps", str(a.steps)], a.timeout
        )
        r["checks"] = [
            _run([*w, "--worker", "check", "--examples", str(a.examples), "--seed", str(s)], a.timeout) for s in a.seeds
        ]
        r["examples"] = [c.get("examples") for c in r["checks"]]
        r["seconds_to_first"] = [c.get("seconds_to_first") for c in r["checks"]]
        r["seconds_to_verdict"] = [c.get("seconds") for c in r["checks"]]
        _judge(r)
        return r

    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        for r in pool.map(one, plan):
            rows.append(r)
            save()
            print(
                f"{r['id']:70s} {r['truth'].get('truth', r['truth'].get('error'))!s:10s} expected {r['expected']} found {r['found']}",
                flush=True,
            )
    save()
    print(json.dumps(summary(rows), indent=1))


if __name__ == "__main__":
    main()

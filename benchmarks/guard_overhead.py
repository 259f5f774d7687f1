"""What graphsafe.guard costs a graph runner: replays per second unguarded, with the guard off, in
``sample`` mode (1 check per ``--every`` replays; through ``before_replay`` and through ``Guard.wrap``,
"wrapped") and in ``strict`` mode, per fixed reference backend;
and that the fixed backends pass strict guarding over ``--steps`` served steps.

Per backend, examples/guarded_runner.py's runner captures every size (largest first) once, under
four guards at once (off, sample, wrapped, strict: guards nest, each gets the engine's recording).  Timing:
the largest graph after one prepare, ``--replays`` replays per mode in ``--rounds`` interleaved
blocks, each block ``[guard.before_replay(key)]; graph.replay()`` in a loop, synchronised before
and after; per-replay time is the median over blocks.  Also timed alone: one strict check and one
skipped sample call, and from them the overhead each mode adds to the unguarded replay time
(``estimated_*``: where a replay is slow or noisy, as on the emulator, the wall-time difference
between blocks is noise and these are the figures to read).  Serving: ``--steps`` steps of a random batch each (pad, prepare, strict
check, replay), counting findings (a fixed backend must have none).

    python benchmarks/guard_overhead.py [--engine auto|cuda|emulate] [--replays 10000] [--steps 10000]
        [--every 100] [--rounds 10] [--only NAME...] [--out DIR]

Writes benchmarks/results/guard-overhead-<engine>-<cpu|gpu>.json (or $OUT/...).  On the CPU emulator a
replay is slow Python (the Triton interpreter), so use far fewer replays and steps there; the
overhead target (sample 1/100 under 1%) is for a GPU.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import _util  # noqa: F401  (sets up the interpreter before kernels are imported)

sys.path.insert(0, str(_util.ROOT / "examples"))

import torch  # noqa: E402
from guarded_runner import GraphRunner, draw_batch  # noqa: E402

import graphsafe  # noqa: E402
from graphsafe import reference  # noqa: E402

MODES = ("unguarded", "off", "sample", "wrapped", "strict")  # wrapped: sample through Guard.wrap


def _per_call(fn, n: int, sync) -> float:
    """Seconds per call of ``fn`` over ``n`` calls, synchronised before and after."""
    sync()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t) / n


def _loop_body(guard, key, replay):
    """One step of a runner's replay loop: ``guard.before_replay(key)`` (unless None), then the replay."""
    if guard is None:

        def body() -> None:
            replay()
    else:
        before = guard.before_replay

        def body() -> None:
            before(key)
            replay()

    return body


def measure(name: str, engine: str, replays: int, steps: int, every: int, rounds: int) -> dict:
    runner = GraphRunner(reference.resolve(name), engine=engine, guard_options=dict(mode="strict"))
    sample = graphsafe.guard.Guard(runner.backend, mode="sample", every=every)
    off = graphsafe.guard.Guard(runner.backend, mode="off")
    wrapped = graphsafe.guard.Guard(runner.backend, mode="sample", every=every)
    runner.capture(sample, off, wrapped)
    strict = runner.guard
    sync = runner.engine.synchronize
    key = max(runner.graphs)
    replay = runner.graphs[key].replay
    with torch.no_grad():
        runner.backend.prepare(draw_batch(random.Random(0), runner.spec, runner.backend.support, seed=1).padded(key))
        guarded = {
            "unguarded": _loop_body(None, key, replay),
            **{m: _loop_body(g, key, replay) for m, g in (("off", off), ("sample", sample), ("strict", strict))},
            "wrapped": wrapped.wrap(replay, key),
        }
        for fn in guarded.values():  # warm every path once
            fn()
        per_block = max(1, replays // rounds)
        times: dict[str, list[float]] = {m: [] for m in MODES}
        for _ in range(rounds):
            for m in MODES:
                times[m].append(_per_call(guarded[m], per_block, sync))
        check_s = _per_call(lambda: strict.check(key), 200, lambda: None)  # the full diagnosis, for scale
        strict_s = _per_call(lambda: strict.before_replay(key), 2000, lambda: None)
        skip_s = _per_call(lambda: sample.before_replay(key), 20000, lambda: None)
        # serving: pad, prepare, strict check, replay
        rng = random.Random(1)
        batches = [draw_batch(rng, runner.spec, runner.backend.support, seed=i + 1) for i in range(steps)]
        sync()
        t = time.perf_counter()
        for b in batches:
            runner.step(b)
        sync()
        serve_s = time.perf_counter() - t
    med = {m: statistics.median(v) for m, v in times.items()}
    stats = strict.stats()[key]
    row = {
        "variant": name,
        "graph_size": key,
        "storages": stats["storages"],
        "paths": stats["paths"],
        "replays_per_mode": per_block * rounds,
        "rounds": rounds,
        **{f"{m}_us_per_replay": round(med[m] * 1e6, 3) for m in MODES},
        **{f"{m}_overhead_pct": round(100 * (med[m] / med["unguarded"] - 1), 2) for m in MODES[1:]},
        "strict_check_us": round(strict_s * 1e6, 3),
        "sample_skip_ns": round(skip_s * 1e9, 1),
        # the same from the guard's own costs (what wall-time differences show only above their noise)
        "estimated_sample_overhead_pct": round(100 * (strict_s + (every - 1) * skip_s) / every / med["unguarded"], 3),
        "estimated_strict_overhead_pct": round(100 * strict_s / med["unguarded"], 3),
        "diagnosis_us": round(check_s * 1e6, 1),
        "serve_steps": steps,
        "serve_ms_per_step": round(serve_s / max(steps, 1) * 1e3, 3),
        "serve_findings": len(strict.findings) + len(sample.findings),
        "findings": [f.summary() for f in strict.findings + sample.findings],
    }
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="auto", choices=("auto", "cuda", "emulate"))
    ap.add_argument("--replays", type=int, default=10_000, help="replays per mode (timing)")
    ap.add_argument("--steps", type=int, default=10_000, help="served steps under the strict guard (correctness)")
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    eng = graphsafe.engines.get_engine(a.engine)
    meta = {
        "engine": eng.name,
        "device": str(eng.device),
        "replays": a.replays,
        "steps": a.steps,
        "every": a.every,
        "rounds": a.rounds,
    }
    rows = []
    for name in a.only or reference.FIXED:
        rows.append(measure(name, eng.name, a.replays, a.steps, a.every, a.rounds))
        print({k: v for k, v in rows[-1].items() if k != "findings"}, flush=True)
        _util.write(f"guard-overhead-{eng.name}", {**meta, "rows": rows}, a.out)
    print(
        f"\n| variant | unguarded us/replay | off | sample 1/{a.every} (est.) | wrapped 1/{a.every} | strict (est.) "
        f"| strict check us | served steps (findings) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['variant']} | {r['unguarded_us_per_replay']} | {r['off_overhead_pct']:+}% | "
            f"{r['sample_overhead_pct']:+}% ({r['estimated_sample_overhead_pct']}%) | {r['wrapped_overhead_pct']:+}% | "
            f"{r['strict_overhead_pct']:+}% ({r['estimated_strict_overhead_pct']}%) | {r['strict_check_us']} | "
            f"{r['serve_steps']} ({r['serve_findings']}) |"
        )
    if any(r["serve_findings"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()

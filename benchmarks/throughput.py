"""Checked steps per second through graphsafe against a bare hand-written loop doing the same work.

The bare loop captures every size once through the engine (real CUDA graphs on a GPU, the
emulator's capture on a CPU), then per example builds a fresh eager instance from the same seed and
per step runs prepare, replay, eager prepare + forward, and compares outputs and static tensors.
graphsafe runs the same number of examples through ``graphsafe.check`` (Hypothesis drawing,
poisoning, pointer checks included) twice: with the ``worst`` capture policy only (what the bare
loop does: the ratio the goal is about), and with the default policies (worst, ascending, minimal,
drawn), whose extra captures (a session per policy, a capture per drawn example) fall inside its
timing as they do in any real check.

Compilation is outside every timing: with ``--warm full`` (the default) each timed run follows an
identical run (same plans, same seed), so every kernel specialisation it meets was compiled by it;
``--warm quick`` warms with two examples only (the previous releases' method, which can leave a
first-seen specialisation's compile inside a timed run).

The bare loop is host-bound, and a shared host's speed drifts (on one H100 host the same bare loop
measured 466 and 771 steps/s a minute apart): ``--repeat`` rounds (default 3) each time the bare loop,
the ``worst`` check and the default check in turn, and a row keeps each one's best round (as ``timeit``
does), every round's steps per second alongside.  A second figure per row is the median of the rounds'
ratios, each round's checks against the bare loop timed just before them (``*_median_of_rounds``).  The
JSON records the machine (GPU, host, CUDA, torch, triton), the commit and the method.

    python benchmarks/throughput.py [--engine E] [--examples 200] [--steps 4] [--warm full|quick] [--repeat 3] [--only NAME...]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
import warnings

import _util  # noqa: F401
import torch

import graphsafe
from graphsafe import reference
from graphsafe import strategies as gs
from graphsafe.capture.policies import capture_query_len
from graphsafe.capture.statics import randomise_static, static_dict
from graphsafe.checker import resolve_target
from graphsafe.contract import CAPTURE_SEED
from graphsafe.engines import get_engine
from graphsafe.engines.base import as_outputs


def draw_plans(spec, support, examples, steps):
    import dataclasses

    from hypothesis.errors import NonInteractiveExampleWarning

    sub = dataclasses.replace(spec, capture_sizes=())
    worst = spec.worst_case_batch(spec.max_reqs, query_len=capture_query_len(support, spec), seed=CAPTURE_SEED)
    strat = gs.step_sequences(sub, support=support, max_steps=steps, capture_batch=worst)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonInteractiveExampleWarning)
        return [strat.example() for _ in range(examples)]


def bare_loop(cls, spec, engine, plans) -> tuple[int, float, int]:
    """Returns (steps, seconds, steps whose graph output or state differed from eager)."""
    dev = engine.device
    g = cls()
    g.setup(spec, dev)
    q = capture_query_len(cls.support, spec)
    graphs, outs = {}, {}
    sizes = sorted(spec.default_capture_sizes(), reverse=True)
    pool = engine.new_pool()
    with torch.no_grad():
        for s in sizes:
            g.prepare(spec.worst_case_batch(s, query_len=q, seed=CAPTURE_SEED).padded(s))
            engine.warmup(g.forward, skip_keys=set())
            gr = engine.capture(g.forward, pool=pool)
            graphs[s], outs[s] = gr.replay_fn, gr.outputs
        sizes = sorted(sizes)
        n = bad = 0
        t = time.perf_counter()
        for plan in plans:
            seed = plan[0].seed
            randomise_static(g, seed)
            e = cls()
            e.setup(spec, dev)
            randomise_static(e, seed)
            for b in plan:
                s = next(x for x in sizes if x >= b.num_reqs)
                pb = b.padded(s)
                g.prepare(pb)
                graphs[s]()
                live_g = [x.clone() for x in g.live(outs[s], pb)]
                e.prepare(b)
                live_e = e.live(as_outputs(e.forward()), b)
                ok = all(torch.allclose(x, y, equal_nan=True) for x, y in zip(live_g, live_e))
                se = static_dict(e)
                ok = ok and all(
                    torch.allclose(v.float(), se[k].float(), equal_nan=True) for k, v in static_dict(g).items()
                )
                n += 1
                bad += not ok
        engine.synchronize()
        return n, time.perf_counter() - t, bad


def through_graphsafe(name, engine_name, examples, steps, capture=None) -> tuple[int, float, bool]:
    """Steps, seconds and verdict of one check; ``capture``: the capture policies (None: the default)."""
    kw = {} if capture is None else {"capture": capture}
    r = graphsafe.check(name, engine=engine_name, examples=examples, steps=steps, database=False, seed=0, **kw)
    return r.steps, r.seconds, r.ok


def warm_up(name, engine_name, examples, steps, warm) -> None:
    """Compile what the timed checks meet: the same checks once (``full``) or two examples (``quick``)."""
    for capture in (("worst",), None):
        kw = {} if capture is None else {"capture": capture}
        n, seed = (examples, 0) if warm == "full" else (2, 99)
        graphsafe.check(name, engine=engine_name, examples=n, steps=steps, database=False, seed=seed, **kw)


def best(rounds: list[tuple[int, float]]) -> tuple[int, float]:
    """The (steps, seconds) of the fastest round."""
    return max(rounds, key=lambda r: r[0] / r[1])


def paired_median(checked: list[tuple[int, float]], bare: list[tuple[int, float]]) -> float:
    """The median over rounds of each round's ratio to the bare loop timed just before it: a second figure
    beside the ratio of the best rounds, less moved by one quiet moment of a shared host (the bare loop's
    rounds are the shortest, so its best round is the likeliest to fall in one)."""
    return round(statistics.median((n / s) / (bn / bs) for (n, s), (bn, bs) in zip(checked, bare)), 3)


def host() -> dict:
    """What ``_util.machine()`` leaves out: the host, the CUDA runtime, the commit measured (``$GRAPHSAFE_COMMIT``
    when set: a copy of the tree whose ``.git`` is not the tree's own, as on a lent GPU machine, names it so)."""
    given = os.environ.get("GRAPHSAFE_COMMIT")
    if given:
        return {
            "host": platform.node(),
            "cuda": torch.version.cuda,
            "commit": given,
            "dirty": None,
            "commit_from": "$GRAPHSAFE_COMMIT",
        }
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=_util.ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"], cwd=_util.ROOT, capture_output=True, text=True
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = None, None
    return {"host": platform.node(), "cuda": torch.version.cuda, "commit": commit, "dirty": dirty}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument(
        "--warm",
        choices=("full", "quick"),
        default="full",
        help="full: each timed run follows an identical one (default); quick: two examples before",
    )
    ap.add_argument("--repeat", type=int, default=3, help="rounds of (bare, worst, default); each keeps its best")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    eng = get_engine(a.engine)
    rows = []
    for name in a.only or reference.FIXED:
        cls, _ = resolve_target(name)
        spec = cls.default_spec
        plans = draw_plans(spec, cls.support, a.examples, a.steps)
        bare_loop(cls, spec, eng, plans if a.warm == "full" else plans[:2])  # compile
        warm_up(name, eng.name, a.examples, a.steps, a.warm)
        bare, worst, default, ok, bad = [], [], [], True, 0
        for _ in range(max(1, a.repeat)):
            bn, bs, bad_r = bare_loop(cls, spec, eng, plans)
            bare.append((bn, bs))
            bad = max(bad, bad_r)
            gn, gsec, gok = through_graphsafe(name, eng.name, a.examples, a.steps, capture=("worst",))
            worst.append((gn, gsec))
            dn, dsec, dok = through_graphsafe(name, eng.name, a.examples, a.steps)
            default.append((dn, dsec))
            ok = ok and gok and dok
        (bn, bs), (gn, gsec), (dn, dsec) = best(bare), best(worst), best(default)
        row = {
            "variant": name,
            "bare_steps": bn,
            "bare_seconds": round(bs, 3),
            "bare_steps_per_s": round(bn / bs, 1),
            "graphsafe_steps": gn,
            "graphsafe_seconds": round(gsec, 3),
            "graphsafe_steps_per_s": round(gn / gsec, 1),
            "ratio": round((gn / gsec) / (bn / bs), 3),
            "graphsafe_ok": ok,
            "bare_mismatched_steps": bad,
            "default_steps": dn,
            "default_seconds": round(dsec, 3),
            "default_steps_per_s": round(dn / dsec, 1),
            "default_ratio": round((dn / dsec) / (bn / bs), 3),
            "ratio_median_of_rounds": paired_median(worst, bare),
            "default_ratio_median_of_rounds": paired_median(default, bare),
            "rounds_steps_per_s": {
                k: [round(n / s, 1) for n, s in v] for k, v in (("bare", bare), ("worst", worst), ("default", default))
            },
        }
        rows.append(row)
        print(row, flush=True)
        _util.write(
            f"throughput-{eng.name}",
            {
                "engine": eng.name,
                "examples": a.examples,
                "steps": a.steps,
                "warm": a.warm,
                "repeat": a.repeat,
                "run": host(),
                "rows": rows,
            },
            a.out,
        )
    print(
        "\n| variant | bare steps/s | graphsafe steps/s (worst) | ratio | default policies steps/s | ratio "
        "| median of the rounds' ratios (worst / default) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['variant']} | {r['bare_steps_per_s']} | {r['graphsafe_steps_per_s']} | {r['ratio']} "
            f"| {r['default_steps_per_s']} | {r['default_ratio']} "
            f"| {r['ratio_median_of_rounds']} / {r['default_ratio_median_of_rounds']} |"
        )


if __name__ == "__main__":
    main()

"""Profile one check: where graphsafe's time goes (Hypothesis drawing, capture, the per-step path).

Prints a breakdown by part of the check (seconds under cProfile, which slows pure-Python code more
than kernels), then cProfile's own lists (cumulative, then internal time).

    python benchmarks/profile_check.py NAME [--engine E] [--examples N] [--capture worst ...] [--lines 28]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import re

import _util  # noqa: F401

import graphsafe

#: (part, function pattern, caller pattern or None): cumulative seconds of the matching functions (from
#: the matching callers only).  The parts do not overlap; what none covers is "other".
PARTS = [
    ("Hypothesis: drawing plans", r"conjecture/data\.py:draw$", r"hypothesis/control\.py"),
    ("capture sessions (a phase's, a drawn example's)", r"capture/session\.py:__init__$", None),
    ("graph replays of the other steps", r"diagnosis/context\.py:replay_live$", r"checker/steps\.py:_replay$"),
    (
        "nondeterminism probe: both replays of each example's first step (one is the step's own)",
        r"probes/nondeterministic_replay\.py:run$",
        None,
    ),
    ("stale-pointer probe", r"probes/stale_pointer\.py:run$", None),
    (
        "target's own code: eager set-up, prepare (both instances), eager forward",
        r"capture/session\.py:call_target$",
        r"checker/steps\.py:_replay$",
    ),
    ("comparison", r"capture/compare\.py:(step|statics)$", r"checker/steps\.py:_replay$"),
    (
        "poison, reset, statics, region, live rows",
        r"(session\.py:(reset|poison|share_constants)|statics\.py:"
        r"(randomise_static|static_dict)|compare\.py:region|context\.py:live_rows)$",
        r"checker/steps\.py:_replay$",
    ),
    ("diagnosis (only after a difference)", r"checker/steps\.py:_diagnosed$", None),
    (
        "gc.collect between phases (only when something a phase made is still alive)",
        r"gc\.collect",
        r"checker/api\.py:_release$",
    ),
]


def cumulative(st: pstats.Stats, pattern: str, caller: str | None) -> float:
    total = 0.0
    for (file, _line, name), (_cc, _nc, _tt, ct, callers) in st.stats.items():
        if not re.search(pattern, f"{file}:{name}"):
            continue
        if caller is None:
            total += ct
        else:
            total += sum(v[3] for (cf, _cl, cn), v in callers.items() if re.search(caller, f"{cf}:{cn}"))
    return total


def breakdown(st: pstats.Stats, seconds: float) -> list[tuple[str, float]]:
    rows = [(part, cumulative(st, pat, caller)) for part, pat, caller in PARTS]
    engine = cumulative(st, r"hypothesis/core\.py:run_engine$", None)
    tests = cumulative(st, r"checker/steps\.py:run$", None)  # the examples themselves
    rows.insert(
        1, ("Hypothesis: its engine (bookkeeping, generation, shrinking logic)", max(0.0, engine - tests - rows[0][1]))
    )
    rows.append(("other", max(0.0, seconds - sum(s for _, s in rows))))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name")
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--capture", nargs="*", help="capture policies (default: the check's default)")
    ap.add_argument("--lines", type=int, default=28)
    a = ap.parse_args()
    kw = {"capture": tuple(a.capture)} if a.capture else {}
    graphsafe.check(a.name, engine=a.engine, examples=2, database=False, seed=99, **kw)  # capture and compile
    prof = cProfile.Profile()
    prof.enable()
    r = graphsafe.check(a.name, engine=a.engine, examples=a.examples, database=False, seed=0, **kw)
    prof.disable()
    print(
        f"{a.name}: {r.steps} steps in {r.seconds:.2f}s = {r.steps / r.seconds:.1f} steps/s; "
        f"{r.calls} examples run; {', '.join(sorted(r.kinds)) or 'ok'}"
    )
    st = pstats.Stats(prof)
    print("\n| part | s | share |\n|---|---|---|")
    for part, s in breakdown(st, r.seconds):
        print(f"| {part} | {s:.2f} | {s / r.seconds:.0%} |")
    print()
    st.sort_stats("cumulative").print_stats(r"graphsafe/|hypothesis/core", a.lines)
    st.sort_stats("tottime").print_stats(a.lines)


if __name__ == "__main__":
    main()

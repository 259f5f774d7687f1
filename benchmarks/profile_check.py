"""Profile one check: where graphsafe's time goes (Hypothesis drawing, capture, the per-step path).

    python benchmarks/profile_check.py NAME [--engine E] [--examples N] [--capture worst ...]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import _util  # noqa: F401

import graphsafe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
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
    print(f"{a.name}: {r.steps} steps in {r.seconds:.2f}s = {r.steps / r.seconds:.1f} steps/s")
    st = pstats.Stats(prof)
    st.sort_stats("cumulative").print_stats(r"graphsafe/|strategies/|hypothesis/core", a.lines)
    st.sort_stats("tottime").print_stats(a.lines)


if __name__ == "__main__":
    main()

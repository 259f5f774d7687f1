"""Where a check's wall time goes, by wall-clock timers around its parts (no profiler's own overhead).

cProfile (``profile_check.py``) multiplies the cost of every Python call and so overstates the
host-side parts of a host-bound loop; this wraps a few dozen functions in ``perf_counter`` timers
(about a microsecond each) and prints each part's inclusive seconds and its share of the check, then
the same for the bare loop of ``throughput.py`` on the same plans.  Parts nest (a probe's replays are
inside the probe): the shares do not add up to 100%.

    python benchmarks/check_parts.py NAME [--engine E] [--examples 200] [--steps 4] [--capture worst]
"""

from __future__ import annotations

import argparse
import functools
import gc
import time
from collections import defaultdict

import _util  # noqa: F401
import torch

import graphsafe
from graphsafe import probes
from graphsafe.capture import compare
from graphsafe.capture import session as session_mod
from graphsafe.capture.context import StepContext
from graphsafe.checker import api, resolve_target, steps
from graphsafe.engines import get_engine

TIMES: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)


def _timed(label, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            TIMES[label] += time.perf_counter() - t
            CALLS[label] += 1

    return wrapper


def _wrap(owner, attr, label):
    setattr(owner, attr, _timed(label, getattr(owner, attr)))


def _by_method(fn):
    """``call_target`` timed per target method (its first argument names it)."""

    def wrapper(method, f, *a):
        t = time.perf_counter()
        try:
            return fn(method, f, *a)
        finally:
            TIMES["target: " + method] += time.perf_counter() - t
            CALLS["target: " + method] += 1

    return wrapper


def _parts(engine) -> list[tuple]:
    """(owner, attribute, label) of every timed function; an indented label is a part of the one above."""
    from graphsafe.capture import gpu_verdict, ledger, statics

    eng = type(engine)
    return [
        (session_mod.CaptureSession, "__init__", "capture session (all sizes)"),
        (steps.ExampleRunner, "run", "example (all its steps)"),
        (session_mod.CaptureSession, "reset", "session.reset"),
        (session_mod.CaptureSession, "poison", "session.poison"),
        (session_mod.CaptureSession, "share_constants", "session.share_constants"),
        (StepContext, "replay_live", "replay_live (poison outputs, replay, sync, clone)"),
        (eng, "synchronize", "engine.synchronize"),
        (compare.Comparator, "step", "comparator.step"),
        (compare.Comparator, "region", "comparator.region"),
        (compare.Comparator, "statics", "comparator.statics (end of example)"),
        (steps, "static_dict", "static_dict"),
        (steps, "randomise_static", "randomise_static (eager)"),
        (steps, "live_rows", "live_rows (eager)"),
        (api, "_release", "release a phase"),
        (statics.SavedStatics, "__init__", "  SavedStatics (nondeterminism probe)"),
        (statics.SavedStatics, "restore", "  SavedStatics.restore"),
        (ledger.Snapshot, "restore_into", "  Snapshot.restore_into (reset)"),
        (session_mod, "storages_of", "  storages_of (poison, reset)"),
        (session_mod, "randomise_static", "  randomise_static (reset)"),
        (session_mod, "poison_floats", "  poison_floats (poison)"),
        (compare, "verdicts", "  verdicts"),
        (gpu_verdict, "count_bad", "  count_bad (launches)"),
        (compare, "compare_many", "  compare_many"),
        (session_mod.CaptureSession, "_capture", "  session: one size's capture"),
        (session_mod.CaptureSession, "_constants", "  session: constants"),
        (session_mod.CaptureSession, "_graph_buffers", "  session: graph buffers"),
        (eng, "warmup", "    engine.warmup"),
        (eng, "prescreen", "    engine.prescreen"),
        (eng, "capture", "    engine.capture"),
        (ledger.Snapshot, "__init__", "    Snapshot (capture)"),
        (ledger.Snapshot, "changed", "    Snapshot.changed (capture)"),
        (session_mod, "paths_by_storage", "    paths_by_storage (capture)"),
    ]


def instrument(engine) -> None:
    for owner, attr, label in _parts(engine):
        _wrap(owner, attr, label)
    steps.call_target = _by_method(steps.call_target)
    session_mod.call_target = _by_method(session_mod.call_target)
    for p in list(probes.PROBES.values()):
        if p.stage == "step":
            probes.PROBES[p.name] = type(p)(p.name, p.kind, p.stage, _timed("probe: " + p.name, p.run), p.summary)


_GC: dict[str, float] = {}


def _gc_timer(phase, info):
    if phase == "start":
        _GC["t"] = time.perf_counter()
    elif "t" in _GC:
        label = f"gc: generation {info['generation']} (automatic or not)"
        TIMES[label] += time.perf_counter() - _GC.pop("t")
        CALLS[label] += 1


def instrument_hypothesis() -> None:
    """Time Hypothesis's drawing of a whole plan (the outermost draw) and every collection."""
    from hypothesis.internal.conjecture import data as hdata

    draw = hdata.ConjectureData.draw
    depth = [0]

    def outer_draw(self, *a, **k):
        depth[0] += 1
        t = time.perf_counter()
        try:
            return draw(self, *a, **k)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                TIMES["hypothesis: drawing a plan"] += time.perf_counter() - t
                CALLS["hypothesis: drawing a plan"] += 1

    hdata.ConjectureData.draw = outer_draw
    gc.callbacks.append(_gc_timer)


def report(total: float, n_steps: int, title: str) -> None:
    print(f"\n{title}: {n_steps} steps in {total:.3f} s = {n_steps / total:.1f} steps/s")
    print("| part | calls | s | share | us per call |\n|---|---|---|---|---|")
    for k, v in sorted(TIMES.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {CALLS[k]} | {v:.3f} | {v / total:.0%} | {1e6 * v / max(CALLS[k], 1):.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("name")
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--capture", nargs="*", default=["worst"], help="capture policies (none given: the default ones)")
    a = ap.parse_args()
    import throughput

    eng = get_engine(a.engine)
    kw = {"capture": tuple(a.capture)} if a.capture else {}
    run = functools.partial(
        graphsafe.check, a.name, engine=a.engine, examples=a.examples, steps=a.steps, database=False, seed=0, **kw
    )
    run()  # compiles what the timed run meets
    instrument(eng)
    instrument_hypothesis()
    r = run()
    report(r.seconds, r.steps, f"{a.name} through graphsafe ({', '.join(a.capture) or 'default policies'})")
    print(f"gc frozen objects: {gc.get_freeze_count()}; thresholds {gc.get_threshold()}")
    cls, _ = resolve_target(a.name)
    spec = cls.default_spec
    plans = throughput.draw_plans(spec, cls.support, a.examples, a.steps)
    TIMES.clear()
    CALLS.clear()
    throughput.bare_loop(cls, spec, eng, plans)
    n, s, _ = throughput.bare_loop(cls, spec, eng, plans)
    print(
        f"\n{a.name} bare loop: {n} steps in {s:.3f} s = {n / s:.1f} steps/s (on {torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'})"
    )


if __name__ == "__main__":
    main()

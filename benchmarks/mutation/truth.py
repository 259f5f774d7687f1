"""Ground truth for a mutant: capture it as graphsafe does, replay fixed step sequences, and compare every step
with a fresh eager instance, here, without graphsafe's probes or diagnosis.

Capture, once per capture policy graphsafe explores (worst-case batches largest size first, the same smallest
first, minimal dummy batches, and one drawn batch for a graph of the largest size), on a new instance each: one
graph per capture size, each after ``prepare_capture`` of the policy's batch, one warm-up and one pre-screen run
(the engine's own, as graphsafe's capture session does).  Steps, per policy: ``sequences`` sequences of
``steps`` batches drawn with a fixed seed (:func:`~mutation.subjects.draw_batch`); in each
sequence the first batch fills the largest graph and the second is one request short of it (padded whenever
the spec's largest size is not a power of two plus one), the rest are drawn; lengths vary throughout.  Each
sequence starts from static tensors (caches) filled from the sequence's seed; buffers carry over between
steps and sequences as they do in a serving engine.

Per step: a fresh eager instance is set up, given the graph instance's static tensors, prepared with the
unpadded batch and run; then the graph instance is prepared with the padded batch, its floating outputs are
NaN-filled (graph memory that another graph may have used) and the graph replays.  The live outputs and
every static tensor are compared (integers exactly, floats within the dtype's tolerance, NaN equal to NaN).
A mutant is ``real`` when any step differs, its capture fails (the pre-screen or the capture itself: the
setup, ``prepare()`` and warm-up raising make a broken mutant, no verdict), its replay raises, or its graph reads memory
whose owner freed it since capture (the recording's weak references say so: the emulator keeps a freed buffer's
bytes, so such a replay may still match; on a GPU the allocator reuses them); else ``equivalent``.
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch

from graphsafe.capture.policies import POLICIES
from graphsafe.capture.statics import randomise_static, static_dict, static_keys
from graphsafe.contract import capture_prepare
from graphsafe.engines import as_outputs
from graphsafe.values import derive_seed

from .subjects import draw_batch, spec_of, support_of

__all__ = ["ground_truth", "TOLERANCE", "differs"]

#: dtype -> (rtol, atol) for floats; integers compare exactly
TOLERANCE = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


def differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do graph value ``a`` and eager value ``b`` differ (shape, integers exactly, floats in tolerance)?"""
    if a.shape != b.shape:
        return True
    if not a.dtype.is_floating_point:
        return not torch.equal(a.cpu(), b.cpu())
    rtol, atol = TOLERANCE.get(a.dtype, (1e-1, 1e-1))  # fp8 and the like
    x, y = a.detach().double().cpu(), b.detach().double().cpu()
    return not torch.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True).all().item()


def _live(target: Any, out: Any, batch: Any) -> tuple[torch.Tensor, ...]:
    return tuple(t.detach().clone() for t in as_outputs(target.live(out, batch)))


class _CaptureFailed(Exception):
    """The engine refused or failed the capture (its cause is the engine's error)."""


#: the capture policies graphsafe explores, each replayed here on graphs of its own
POLICY_NAMES = ("worst", "ascending", "minimal", "drawn")


def _capture(cls: type, engine: Any, policy: str, rng: random.Random) -> tuple[Any, dict[int, Any]]:
    """A graph instance of ``cls`` and its graphs by size, captured under ``policy`` (``drawn``: one graph of
    the largest size, captured with a batch drawn from ``rng``)."""
    spec, support = spec_of(cls), support_of(cls)
    g = cls()
    with torch.no_grad():
        with engine.host_memory():
            g.setup(spec, engine.device)
        statics = static_keys(g)
        pool, graphs = engine.new_pool(), {}
        sizes = sorted(spec.default_capture_sizes(), reverse=policy != "ascending")
        drawn = draw_batch(rng, spec, support) if policy == "drawn" else None
        for size in sizes[-1:] if drawn is not None and policy != "ascending" else sizes:
            if drawn is not None:
                size = max(sizes)
                batch = drawn.padded(size)
            else:
                batch = POLICIES[policy].batch_for(spec, support, size)
            with engine.host_memory():
                capture_prepare(g)(batch)
            engine.warmup(g.forward, skip_keys=statics)
            try:
                engine.prescreen(g.forward)  # (on CUDA: refuses a host sync, as the capture would)
                graph = engine.capture(g.forward, pool=pool)
            except Exception as err:  # noqa: BLE001 - a capture that fails is the mutant's symptom
                raise _CaptureFailed(err) from err
            graph.size = size
            graphs[size] = graph
    return g, graphs


def ground_truth(cls: type, engine: Any, *, sequences: int = 2, steps: int = 5, seed: int = 0) -> dict:
    """``{"truth": "real" | "equivalent", "symptom", "where", "policy", "steps", "seconds"}`` for ``cls``: every
    capture policy in turn, ``sequences`` sequences of ``steps`` steps each (see the module docstring)."""
    t0 = time.perf_counter()
    done = 0
    for policy in POLICY_NAMES:
        rng = random.Random(f"{seed}:{policy}")
        found = _replayed(cls, engine, policy, rng, sequences, steps, seed)
        done += found.pop("steps")
        if found["truth"] == "real":
            return {**found, "policy": policy, "steps": done, "seconds": time.perf_counter() - t0}
    return {
        "truth": "equivalent",
        "symptom": "",
        "where": "",
        "policy": "",
        "steps": done,
        "seconds": time.perf_counter() - t0,
    }


def _replayed(cls: type, engine: Any, policy: str, rng: random.Random, sequences: int, steps: int, seed: int) -> dict:
    spec, support = spec_of(cls), support_of(cls)

    def verdict(truth: str, symptom: str = "", where: str = "", done: int = 0) -> dict:
        return {"truth": truth, "symptom": symptom, "where": where, "steps": done}

    try:
        g, graphs = _capture(cls, engine, policy, rng)
    except _CaptureFailed as failed:
        err = failed.__cause__
        text = str(err).splitlines()[0][:200] if str(err) else ""
        return verdict("real", "capture-failed", f"{type(err).__name__}: {text}")
    sizes = sorted(graphs)
    done = 0
    for s in range(sequences):
        with torch.no_grad():
            randomise_static(g, derive_seed(seed, "mutants", policy, s))
        for i in range(steps):
            num = spec.max_reqs if i == 0 else max(1, spec.max_reqs - 1) if i == 1 else None
            batch = draw_batch(rng, spec, support, num)
            size = min(x for x in sizes if x >= batch.num_reqs)
            pb = batch.padded(size)
            with torch.no_grad():
                e = cls()
                e.setup(spec, engine.device)
                for name, t in static_dict(e).items():
                    t.copy_(static_dict(g)[name])
                e.prepare(batch)
                out_e = e.forward()
                live_e = _live(e, out_e, batch)
                static_e = {k: v.detach().clone() for k, v in static_dict(e).items()}
                del e, out_e
                graph = graphs[size]
                g.prepare(pb)
                try:
                    for o in graph.outputs:
                        if o.dtype.is_floating_point:
                            o.fill_(float("nan"))
                    graph.replay()
                    engine.synchronize()
                except Exception as exc:  # noqa: BLE001 - a replay that raises is a symptom
                    return verdict("real", "replay-raised", f"{type(exc).__name__} at sequence {s} step {i}", done)
                live_g = _live(g, graph.returned, pb)
                done += 1
                where = f"at sequence {s} step {i} ({pb.short()})"
                dead = graph.dead_inputs()
                if dead:  # the emulator keeps a freed buffer's bytes; a GPU's allocator hands them to someone else
                    return verdict("real", "reads-freed-memory", f"{len(dead)} freed buffer(s) read {where}", done)
                for j, (a, b) in enumerate(zip(live_g, live_e)):
                    if differs(a, b):
                        return verdict("real", "output", f"output {j} {where}", done)
                for name, t in static_dict(g).items():
                    if differs(t, static_e[name]):
                        return verdict("real", "static", f"static {name!r} {where}", done)
    return verdict("equivalent", done=done)

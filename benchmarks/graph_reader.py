"""What the graph reader costs, per capture and per step, on the cuda engine.

    python3 benchmarks/graph_reader.py [--targets NAME ...] [--repeat 10] [--examples 30] [--out DIR]

Per target (the reference kernels, FlashInfer decode where it is installed): capture sessions built with the
reader on and off (``GRAPHSAFE_GRAPH_READER``), the seconds per captured graph (median of ``--repeat``
sessions), the reader's own part (reading the nodes; mapping their addresses onto the target), nodes per
graph; per step, the stale-pointer check (``Graph.dead_inputs()``, every external buffer's weak reference)
in microseconds with the buffers each setting tracks; and a whole check (``worst`` policy, ``--examples``,
after a warm-up check) with the reader on and off.  Results: ``benchmarks/results/graph-reader-cuda-gpu.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import timeit

import _util

import graphsafe
from graphsafe import flashinfer as fi
from graphsafe.capture.graph_map import map_graph, sizes_of
from graphsafe.capture.ledger import storages_of
from graphsafe.capture.session import CaptureSession
from graphsafe.capture.statewalk import paths_by_storage
from graphsafe.checker import resolve_target
from graphsafe.engines.addresses import AddressSpace
from graphsafe.engines.cuda import CudaEngine

DEFAULT = ["triton_mla", "mla_indexer", "flex", "flashmla_lazy", "flashmla_fp8", "flashinfer:decode"]


def sessions(cls: type, reader: bool, repeat: int) -> dict:
    os.environ["GRAPHSAFE_GRAPH_READER"] = "1" if reader else "0"
    spec = cls.default_spec
    sizes = graphsafe.CheckOptions().sizes_for(spec)
    engine = CudaEngine()
    per_graph, s = [], None
    for _ in range(repeat):
        if s is not None:
            s.close()
        t = time.perf_counter()
        s = CaptureSession(cls, spec, engine, sizes)
        per_graph.append((time.perf_counter() - t) / max(1, len(s.graphs)))
    out = {"seconds_per_capture": statistics.median(per_graph), "graphs": len(s.graphs)}
    graphs = list(s.graphs.values())
    out["external_buffers"] = [len(g.recording.external) for g in graphs]
    out["dead_inputs_us"] = statistics.median(timeit.timeit(g.dead_inputs, number=2000) / 2000 * 1e6 for g in graphs)
    if reader and all(g.read is not None for g in graphs):
        out["nodes"] = [len(g.read.nodes) for g in graphs]
        out["read_ms"] = statistics.median(g.read.seconds * 1e3 for g in graphs)
        held, paths = sizes_of(storages_of(s.target, set())), paths_by_storage(s.target)
        maps = []
        for g in graphs:
            t = time.perf_counter()
            map_graph(g.read, held, paths, AddressSpace())
            maps.append((time.perf_counter() - t) * 1e3)
        out["map_ms"] = statistics.median(maps)
    s.close()
    return out


def whole_check(cls: type, reader: bool, examples: int) -> float:
    os.environ["GRAPHSAFE_GRAPH_READER"] = "1" if reader else "0"
    kw = dict(engine="cuda", examples=examples, seed=0, database=False, capture="worst")
    graphsafe.check(cls, **kw)  # warm: every kernel compiled, every library loaded
    t = time.perf_counter()
    r = graphsafe.check(cls, **kw)
    return round(time.perf_counter() - t, 3), sorted(r.kinds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", nargs="*", default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--examples", type=int, default=30)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    for name in a.targets:
        if name.startswith("flashinfer") and fi.requirement() is not None:
            continue
        cls = resolve_target(name)[0]
        row: dict = {"target": name}
        for reader in (True, False):
            key = "on" if reader else "off"
            row[key] = sessions(cls, reader, a.repeat)
            row[key]["check_seconds"], row[key]["kinds"] = whole_check(cls, reader, a.examples)
        rows.append(row)
        on, off = row["on"], row["off"]
        print(
            f"{name:24s} capture {on['seconds_per_capture'] * 1e3:7.2f} ms on, {off['seconds_per_capture'] * 1e3:7.2f} ms off"
            f" (read {on.get('read_ms', 0):.2f} ms, map {on.get('map_ms', 0):.2f} ms, nodes {on.get('nodes')});"
            f" dead_inputs {on['dead_inputs_us']:.1f} us on ({on['external_buffers']} buffers),"
            f" {off['dead_inputs_us']:.1f} us off ({off['external_buffers']});"
            f" check {on['check_seconds']} s on, {off['check_seconds']} s off",
            flush=True,
        )
        _util.write("graph-reader-cuda", {"examples": a.examples, "repeat": a.repeat, "rows": rows}, a.out)
    os.environ.pop("GRAPHSAFE_GRAPH_READER", None)


if __name__ == "__main__":
    main()

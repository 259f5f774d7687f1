"""Run conformance cases on a GPU in worker processes that a broken CUDA context cannot take down.

A capture that fails can leave the CUDA context unusable (``.item()`` inside a capture does), and a
kernel fault ends its process.  Workers fork from ``multiprocessing``'s fork server, which imported
torch and the corpus once and never touched CUDA; each runs its items in order and, after every item,
checks that the context still works.  A worker whose context broke reports the item and stops, and the
next item starts in a fresh worker; one that dies or exceeds the timeout has the item recorded as
``crash`` or ``hang``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence

__all__ = ["run_isolated"]

Item = tuple[str, str]  # (case name, how)


def _healthy() -> bool:
    from graphsafe.engines.cuda import CudaEngine

    return CudaEngine().healthy()


def _serve(conn, items: Sequence[Item]) -> None:
    from . import CASES, runner

    for name, how in items:
        conn.send(("start", name, how))
        verdict = runner.run(CASES[name], how)
        broken = how != "emulate" and not _healthy()
        if broken:
            verdict["broke_context"] = True
        conn.send(("done", name, how, verdict))
        if broken:
            break
    conn.close()


def run_isolated(
    items: Sequence[Item], *, timeout: float = 300.0, report: Callable[[Item, dict], None] = lambda i, v: None
) -> tuple[dict[Item, dict], int]:
    """Every item's verdict, and how many workers ran them; ``report(item, verdict)`` as each ends."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # the server's device queries skip the driver
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch._dynamo", "tests.targets.conformance"])
    results: dict[Item, dict] = {}
    remaining = list(items)
    workers = 0
    while remaining:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, remaining), daemon=True)
        proc.start()
        workers += 1
        child.close()
        current: Item | None = None
        while True:
            if not parent.poll(timeout):
                proc.kill()
                if current is None:  # the worker never started an item: nothing to blame, stop
                    raise RuntimeError(f"a conformance worker sent nothing for {timeout} s")
                results[current] = {"verdict": "hang", "message": f"no result within {timeout:.0f} s"}
                break
            try:
                msg = parent.recv()
            except EOFError:
                if current is not None:
                    proc.join(5)
                    results[current] = {"verdict": "crash", "message": f"the worker died (exit code {proc.exitcode})"}
                break
            if msg[0] == "start":
                current = (msg[1], msg[2])
                continue
            item, verdict = (msg[1], msg[2]), msg[3]
            results[item] = verdict
            report(item, verdict)
            current = None
            remaining.remove(item)
            if verdict.get("broke_context") or not remaining:
                break
        if current is not None:
            report(current, results[current])
            remaining.remove(current)
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    return results, workers

"""``graphsafe check --jobs K``: several targets' checks at once, one sandbox per GPU.

Each target's check already runs in a sandbox child (``--isolate``, the default on CUDA); the command
line waits for it.  With ``--jobs K`` it keeps K checks going at once, from K threads of this one
process: one torch import, one fork server, and every child forked from it, so the fixed start-up a
pytest-xdist run pays once per worker is paid once.  Thread ``j`` gives its checks GPU ``j % k`` on a
host with k GPUs (``CUDA_VISIBLE_DEVICES`` decides which); on the emulator the checks share the CPU.
Without isolation there is no process to hand a check to, so ``--jobs`` above 1 needs ``--isolate``.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from ..errors import UsageError
from .devices import gpu_count, uses_cuda

__all__ = ["parse_jobs", "run_parallel"]

T = TypeVar("T")


def parse_jobs(value: str | None, engine: str, isolate: str) -> int:
    """The number of checks to run at once: ``value`` (``"auto"``: one per GPU where checks run on CUDA,
    else half the CPU cores; None: 1).  A usage error for a bad value, or for more than one without isolation."""
    if value is None:
        return 1
    if str(value).strip().lower() == "auto":
        jobs = gpu_count() if uses_cuda(engine) else max(1, (os.cpu_count() or 2) // 2)
    else:
        try:
            jobs = int(value)
        except ValueError:
            raise UsageError(
                f"--jobs: {value!r} is not a number; give a count of checks to run at once, or auto"
            ) from None
        if jobs < 1:
            raise UsageError(f"--jobs: {jobs} checks at once; give 1 or more")
    if jobs > 1 and isolate != "target":
        raise UsageError(
            f"--jobs {jobs} needs each target checked in a process of its own: add --isolate (off by default on "
            "the emulator) or use --jobs 1"
        )
    return max(1, jobs)


def run_parallel(
    count: int, one: Callable[[int, int | None], T], jobs: int, engine: str, stop: Callable[[], None]
) -> list[T]:
    """``one(i, device)`` for i in ``range(count)``, ``jobs`` at a time; the results in order of ``i``.

    ``device`` is the GPU of the thread that runs it (None off CUDA).  ``stop`` is called every half second
    while the main thread waits (it raises to end the run: a Ctrl-C); the checks still queued are then
    dropped and the exception goes on to the caller, which stops the sandboxes.
    """
    gpus = gpu_count() if uses_cuda(engine) else 0
    slots = itertools.count()
    local = threading.local()

    def init() -> None:
        local.device = next(slots) % gpus if gpus else None

    def call(i: int) -> T:
        return one(i, local.device)

    pool = cf.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="graphsafe-job", initializer=init)
    futures = [pool.submit(call, i) for i in range(count)]
    try:
        pending = set(futures)
        while pending:
            stop()
            _, pending = cf.wait(pending, timeout=0.5)
    except BaseException:
        for f in futures:
            f.cancel()
        pool.shutdown(wait=False)
        raise
    pool.shutdown(wait=True)
    return [f.result() for f in futures]

"""How many threads torch uses in each check: the host's cores shared by the checks that run at once.

torch starts a thread per core in every process.  With several checks at once on one host (``pytest -n N``,
``graphsafe check --jobs K``) each check's process would take every core, and the checks slow each other
down several times over.  So each check's process gets ``max(1, cores // checks at once)`` threads, where the
cores are those this process may run on and the checks at once are the xdist workers
(``PYTEST_XDIST_WORKER_COUNT``) times the command line's ``--jobs``.  One check at a time keeps torch's
default, and so does a run whose user set ``OMP_NUM_THREADS``: theirs is kept.

The sandbox parent puts the number in its child's environment (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``:
:func:`child_environment`) and the child applies it (:func:`apply_from_environment`); a check that runs in
its own process (no isolation) applies it there (:func:`apply_here`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = [
    "USER_VARIABLE",
    "threads_per_check",
    "checks_at_once",
    "set_jobs",
    "cores",
    "for_this_process",
    "child_environment",
    "apply_from_environment",
    "apply_here",
]

#: the variable a user sets to choose the threads themselves (then graphsafe sets none)
USER_VARIABLE = "OMP_NUM_THREADS"
#: what a child's environment gets: OpenMP's and MKL's thread counts (read when the child imports torch)
_CHILD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

_jobs = 1  # checks the command line runs at once from this process (--jobs)


def threads_per_check(at_once: int, cores: int, user_threads: str | None) -> int | None:
    """The rule: torch threads for each of ``at_once`` checks sharing ``cores`` cores, or None to leave
    torch's default alone (one check at a time, or ``user_threads``: an ``OMP_NUM_THREADS`` the user set)."""
    if (user_threads or "").strip() or at_once <= 1:
        return None
    return max(1, cores // at_once)


def set_jobs(jobs: int) -> None:
    """Record that this process runs ``jobs`` checks at once (``graphsafe check --jobs``)."""
    global _jobs
    _jobs = max(1, int(jobs))


def checks_at_once(env: Mapping[str, str] = os.environ) -> int:
    """The checks that run at once on this host: xdist's workers times this process's jobs."""
    try:
        workers = int(env.get("PYTEST_XDIST_WORKER_COUNT", "") or 1)
    except ValueError:
        workers = 1
    return max(1, workers) * _jobs


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def for_this_process(env: Mapping[str, str] = os.environ) -> int | None:
    """:func:`threads_per_check` for the checks this process starts now."""
    return threads_per_check(checks_at_once(env), cores(), env.get(USER_VARIABLE))


def child_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` (a copy of this process's environment) for a sandbox child: with the thread count of
    :func:`for_this_process` set, unless there is none to set."""
    n = for_this_process(env)
    if n is not None:
        for name in _CHILD_VARIABLES:
            env[name] = str(n)
    return env


def apply_from_environment() -> int | None:
    """In a sandbox child: give torch the ``OMP_NUM_THREADS`` of its environment (the parent's choice,
    or the user's); the count applied, or None when there is none."""
    try:
        n = int(os.environ.get(USER_VARIABLE, "").strip())
    except ValueError:
        return None
    if n < 1:
        return None
    _set_torch_threads(n)
    return n


def apply_here() -> int | None:
    """In a process that runs a check itself: give torch :func:`for_this_process` threads, if any."""
    n = for_this_process()
    if n is not None:
        _set_torch_threads(n)
    return n


def _set_torch_threads(n: int) -> None:
    # imported here: torch takes seconds to import, and only a process about to run a check pays for it
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)

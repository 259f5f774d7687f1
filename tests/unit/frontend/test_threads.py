"""Specifications for torch's threads in each check (``graphsafe.frontend.threads``).

* the rule: with C cores and N checks at once, each check gets ``max(1, C // N)`` threads; one check at a
  time keeps torch's default, and so does a run whose user set ``OMP_NUM_THREADS``;
* the checks at once are xdist's workers times the command line's ``--jobs``;
* a sandbox child gets the count in its environment and its torch uses it; the user's count reaches it as is.
"""

from __future__ import annotations

import pytest

from graphsafe.frontend import threads
from graphsafe.frontend.sandbox import Sandbox

TARGET = "tests.targets.synthetic:FreshLens"


@pytest.mark.parametrize(
    "at_once, cores, expected", [(2, 16, 8), (3, 16, 5), (16, 64, 4), (8, 2, 1), (1, 64, None), (0, 8, None)]
)
def test_each_check_gets_the_cores_shared_by_the_checks_at_once(at_once, cores, expected):
    assert threads.threads_per_check(at_once, cores, None) == expected


def test_a_users_omp_num_threads_is_kept():
    assert threads.threads_per_check(16, 64, "12") is None
    assert threads.threads_per_check(16, 64, " ") == 4  # set but empty: not a choice


def test_the_checks_at_once_are_the_xdist_workers_times_the_jobs(monkeypatch):
    monkeypatch.setattr(threads, "_jobs", 1)
    assert threads.checks_at_once({}) == 1
    assert threads.checks_at_once({"PYTEST_XDIST_WORKER_COUNT": "4"}) == 4
    threads.set_jobs(3)
    assert threads.checks_at_once({"PYTEST_XDIST_WORKER_COUNT": "4"}) == 12


def test_a_child_environment_carries_the_count_and_leaves_the_users_alone(monkeypatch):
    monkeypatch.setattr(threads, "cores", lambda: 16)
    monkeypatch.setattr(threads, "_jobs", 1)
    env = threads.child_environment({"PYTEST_XDIST_WORKER_COUNT": "4"})
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "4"
    users = {"PYTEST_XDIST_WORKER_COUNT": "4", "OMP_NUM_THREADS": "7"}
    assert threads.child_environment(dict(users)) == users
    assert "OMP_NUM_THREADS" not in threads.child_environment({})  # one check at a time: torch's default


def _child_threads() -> int | None:
    box = Sandbox(TARGET, engine="emulate")
    try:
        box.start(wait=True, timeout=300)
        return box.threads
    finally:
        box.close()


def test_a_sandbox_child_uses_the_cores_shared_by_two_jobs(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    monkeypatch.setattr(threads, "_jobs", 1)
    threads.set_jobs(2)  # graphsafe check --jobs 2
    assert _child_threads() == max(1, threads.cores() // 2)


def test_a_sandbox_child_uses_the_users_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert _child_threads() == 3

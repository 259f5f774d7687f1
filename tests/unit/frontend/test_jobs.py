"""``graphsafe check --jobs K`` (graphsafe/frontend/jobs.py): how many checks at once, on which GPU, in what order."""

from __future__ import annotations

import threading
import time

import pytest

from graphsafe.errors import UsageError
from graphsafe.frontend import jobs


@pytest.fixture
def four_gpus(monkeypatch):
    monkeypatch.setattr(jobs, "gpu_count", lambda: 4)
    monkeypatch.setattr(jobs, "uses_cuda", lambda engine: engine != "emulate")


def test_no_jobs_option_means_one_check_at_a_time():
    assert jobs.parse_jobs(None, "emulate", "none") == 1


def test_auto_means_one_job_per_gpu_on_cuda(four_gpus):
    assert jobs.parse_jobs("auto", "cuda", "target") == 4


def test_auto_means_half_the_cpu_cores_on_the_emulator(four_gpus, monkeypatch):
    monkeypatch.setattr(jobs.os, "cpu_count", lambda: 8)
    assert jobs.parse_jobs("auto", "emulate", "target") == 4


@pytest.mark.parametrize("value, message", [("x", "'x' is not a number"), ("0", "give 1 or more")])
def test_a_bad_job_count_is_a_usage_error(value, message):
    with pytest.raises(UsageError, match=message):
        jobs.parse_jobs(value, "emulate", "target")


def test_more_than_one_job_needs_isolation():
    with pytest.raises(UsageError, match="add --isolate"):
        jobs.parse_jobs("2", "emulate", "none")


def test_results_come_back_in_target_order_whatever_order_the_checks_end_in(four_gpus):
    def one(i, device):
        time.sleep(0.05 * (3 - i))  # the first ends last
        return i

    assert jobs.run_parallel(4, one, 4, "emulate", lambda: None) == [0, 1, 2, 3]


def test_each_thread_keeps_one_gpu_and_the_threads_take_the_gpus_in_turn(four_gpus):
    seen: dict[str, set] = {}
    lock = threading.Lock()

    def one(i, device):
        time.sleep(0.02)
        with lock:
            seen.setdefault(threading.current_thread().name, set()).add(device)
        return device

    devices = jobs.run_parallel(12, one, 4, "cuda", lambda: None)
    assert all(len(d) == 1 for d in seen.values()), seen  # a thread's checks stay on its GPU
    assert sorted(d for s in seen.values() for d in s) == list(range(len(seen)))
    assert set(devices) <= {0, 1, 2, 3}


def test_checks_run_at_once_up_to_the_job_count():
    running, most = [0], [0]
    lock = threading.Lock()

    def one(i, device):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.1)
        with lock:
            running[0] -= 1

    jobs.run_parallel(6, one, 3, "emulate", lambda: None)
    assert most[0] == 3


def test_off_cuda_a_check_gets_no_gpu(four_gpus):
    assert jobs.run_parallel(3, lambda i, device: device, 2, "emulate", lambda: None) == [None, None, None]


def test_a_stop_raised_while_waiting_drops_the_queued_checks_and_reaches_the_caller():
    started = []

    def one(i, device):
        started.append(i)
        time.sleep(0.3)

    def stop():
        if started:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        jobs.run_parallel(20, one, 2, "emulate", stop)
    time.sleep(0.7)  # the two running checks end; nothing queued starts after the stop
    assert len(started) <= 4

"""``pytest -n auto`` with graphsafe's targets (graphsafe/frontend/plugin.py): one worker per visible GPU,
counted without torch, as xdist's controller must; on a machine without one, xdist's own count."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graphsafe.frontend.plugin import visible_gpus


@pytest.fixture
def driver(tmp_path, monkeypatch):
    """A driver folder listing four GPUs, as ``/proc/driver/nvidia/gpus`` does."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for bus in ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"):
        (tmp_path / bus).mkdir()
    return str(tmp_path)


def test_every_gpu_the_driver_lists_counts_when_nothing_hides_them(driver):
    assert visible_gpus(driver) == 4


@pytest.mark.parametrize(("visible", "count"), [("1,3", 2), ("0", 1), ("", 0), ("2,-1,3", 1), ("0,1,2,3,4,5", 4)])
def test_cuda_visible_devices_cuts_the_count_down(driver, monkeypatch, visible, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert visible_gpus(driver) == count


def test_without_a_driver_there_is_no_gpu(tmp_path):
    assert visible_gpus(str(tmp_path / "absent")) == 0


def test_counting_gpus_imports_no_torch():
    code = (
        "import sys; from graphsafe.frontend.plugin import visible_gpus; visible_gpus(); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr

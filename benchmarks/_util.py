"""Shared benchmark plumbing: engine set-up before kernels are imported, machine description, JSON out."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

from graphsafe.engines.triton_env import use_interpreter  # noqa: E402

use_interpreter()  # before any kernel module is imported (no-op on a GPU machine)

import torch  # noqa: E402


def machine() -> dict:
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    try:
        import triton

        tv = triton.__version__
    except Exception:
        tv = None
    return {
        "gpu": gpu,
        "gpu_count": torch.cuda.device_count() if gpu else 0,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": tv,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def machine_tag() -> str:
    return "gpu" if torch.cuda.is_available() else "cpu"


def write(name: str, data: dict, out_dir: str | None = None) -> Path:
    out = Path(out_dir or os.environ.get("OUT") or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{machine_tag()}.json"
    path.write_text(json.dumps({"machine": machine(), **data}, indent=1))
    print(f"wrote {path}")
    return path

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
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": tv,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def machine_tag() -> str:
    return "gpu" if torch.cuda.is_available() else "cpu"


def result_path(name: str, out_dir: str | None = None) -> Path:
    """Where :func:`write` puts the result ``name``: ``out_dir``, else ``$OUT``, else ``benchmarks/results``."""
    return Path(out_dir or os.environ.get("OUT") or RESULTS) / f"{name}-{machine_tag()}.json"


def write(name: str, data: dict, out_dir: str | None = None) -> Path:
    path = result_path(name, out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), **data}, indent=1))
    print(f"wrote {path}")
    return path


def check_one(
    cls: type, engine: str, examples: int, seed: int, report_dir: str | None, timeout: float, capture: str | None = None
) -> dict:
    """One isolated check of a campaign (the FlashInfer, vLLM and SGLang campaigns): its kinds, findings, support
    level, examples, calls, seconds and notes; an error the check raised is the row's kind, and the campaign goes
    on.  ``capture``: the capture policy (None: the check's default)."""
    import traceback

    import graphsafe

    t = time.perf_counter()
    try:
        r = graphsafe.check(
            cls,
            engine=engine,
            examples=examples,
            seed=seed,
            database=False,
            isolate="target",
            timeout=timeout,
            report_dir=report_dir,
            device="cpu" if engine == "emulate" else None,
            **({"capture": capture} if capture else {}),
        )
    except graphsafe.GraphsafeError as e:
        return {"kinds": [f"error:{type(e).__name__}"], "message": e.message, "seconds": time.perf_counter() - t}
    except Exception as e:  # noqa: BLE001 - the campaign goes on; the row says what happened
        return {
            "kinds": [f"error:{type(e).__name__}"],
            "message": traceback.format_exc(),
            "seconds": time.perf_counter() - t,
        }
    findings = [
        {
            "kind": f.kind.value,
            "severity": f.severity,
            "where": f.where,
            "message": f.message,
            "capture_policy": f.details.get("capture_policy"),
            "examples_to_find": f.examples_to_find,
            "report": str(Path(f.report_dir) / "repro.py") if f.report_dir else None,
        }
        for f in r.findings
    ]
    return {
        "kinds": sorted(r.kinds),
        "support": r.support,
        "findings": findings,
        "examples": r.examples,
        "calls": r.calls,
        "seconds": time.perf_counter() - t,
        "notes": r.notes,
    }

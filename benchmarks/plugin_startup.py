"""What graphsafe's pytest plugin costs a run that does not use it: pytest's start-up with and without it.

A temporary directory holds one plain test (no conftest, no ini), as in another project that has
graphsafe installed.  ``python -m pytest -q`` runs there ``--runs`` times with the plugin (loaded
through its entry point) and as many with ``-p no:graphsafe``, alternating, each a fresh process
without ``TRITON_INTERPRET``; the wall time of each run is measured from outside and the medians
printed.  A third series asks for graphsafe (``--graphsafe-engine auto``: torch, triton and the engine
at start-up) to show what the plugin does once asked.

    python benchmarks/plugin_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import write

PLAIN = "def test_plain():\n    assert 1 + 1 == 2\n"
SERIES = {
    "with the plugin": [],
    "-p no:graphsafe": ["-p", "no:graphsafe"],
    "asked (--graphsafe-engine auto)": ["--graphsafe-engine", "auto"],
}


def one_run(folder: Path, extra: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"pytest {' '.join(extra)} failed:\n{proc.stdout}\n{proc.stderr}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="runs per series (default 15)")
    a = ap.parse_args()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TRITON_INTERPRET", "PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONPATH")
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_plain.py").write_text(PLAIN)
        for extra in SERIES.values():  # warm the file system caches once
            one_run(folder, extra, env)
        times: dict[str, list[float]] = {name: [] for name in SERIES}
        for _ in range(a.runs):
            for name, extra in SERIES.items():
                times[name].append(one_run(folder, extra, env))
    rows = {
        name: {"median_s": round(statistics.median(t), 3), "min_s": round(min(t), 3), "max_s": round(max(t), 3)}
        for name, t in times.items()
    }
    for name, r in rows.items():
        print(f"{name:34s} median {r['median_s']:.3f} s  (min {r['min_s']:.3f}, max {r['max_s']:.3f}, {a.runs} runs)")
    extra_s = rows["with the plugin"]["median_s"] - rows["-p no:graphsafe"]["median_s"]
    print(f"the plugin, not asked, adds {extra_s:+.3f} s to pytest's start-up (median)")
    write("plugin-startup", {"runs": a.runs, "series": rows, "plugin_adds_s": round(extra_s, 3)})


if __name__ == "__main__":
    main()

"""Plot benchmarks/results/*.json into benchmarks/results/benchmarks.png (needs matplotlib).

python benchmarks/plot.py
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def load(name: str) -> dict | None:
    p = RESULTS / name
    return json.loads(p.read_text()) if p.exists() else None


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    # 1. throughput ratio per fixed variant, GPU and CPU
    ax = axes[0]
    for i, (name, label) in enumerate(
        [("throughput-cuda-gpu.json", "cuda"), ("throughput-emulate-cpu.json", "emulate (CPU)")]
    ):
        d = load(name)
        if not d:
            continue
        xs = [r["variant"] for r in d["rows"]]
        ax.bar([j + 0.4 * i for j in range(len(xs))], [r["ratio"] for r in d["rows"]], width=0.4, label=label)
        ax.set_xticks([j + 0.2 for j in range(len(xs))], xs, rotation=30, ha="right")
    ax.axhline(0.5, color="k", ls="--", lw=1, label="goal 0.5")
    ax.set_title("checked steps/s: graphsafe / bare loop")
    ax.legend()
    # 2. examples to first finding per buggy variant
    ax = axes[1]
    for i, (name, label) in enumerate(
        [("detection-cuda-gpu.json", "cuda"), ("detection-emulate-cpu.json", "emulate (CPU)")]
    ):
        d = load(name)
        if not d:
            continue
        rows = [r for r in d["rows"] if r["expected"]]
        ax.bar(
            [j + 0.4 * i for j in range(len(rows))], [r["median_examples"] or 0 for r in rows], width=0.4, label=label
        )
        ax.set_xticks([j + 0.2 for j in range(len(rows))], [r["variant"] for r in rows], rotation=30, ha="right")
    ax.axhline(50, color="k", ls="--", lw=1, label="goal 50")
    ax.set_title("median examples to first finding (5 seeds)")
    ax.legend()
    # 3. xdist scaling
    ax = axes[2]
    for name, label in [
        ("scaling-gpu.json", "cuda (one GPU), a process per target"),
        ("scaling-noisolate-gpu.json", "cuda (one GPU), no isolation"),
        ("scaling-cpu.json", "emulate (2 cores)"),
    ]:
        d = load(name)
        if not d:
            continue
        ax.plot([r["workers"] for r in d["rows"]], [r["speedup"] for r in d["rows"]], marker="o", label=label)
    ax.plot([1, 16], [1, 16], color="grey", lw=0.8, ls=":", label="linear")
    ax.axhline(6, color="k", ls="--", lw=1, label="goal 6x at 16")
    ax.set_xlabel("pytest -n workers")
    ax.set_title("reference suite wall-time speed-up")
    ax.legend()
    fig.tight_layout()
    out = RESULTS / "benchmarks.png"
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Print the README's markdown tables from benchmarks/results/*.json.

python benchmarks/tables.py
"""

from __future__ import annotations

import json
from pathlib import Path

import state_size
from detection import table as detection_table

RESULTS = Path(__file__).resolve().parent / "results"


def load(name):
    p = RESULTS / name
    return json.loads(p.read_text()) if p.exists() else None


def cell(row):
    if row is None:
        return "not run"
    found = ", ".join(row["kinds"]) or "none"
    if row["expected"]:
        return f"{found}; median {row['median_examples']} examples, {row['median_seconds']} s"
    return f"{found} ({row['examples']} examples)"


def detection(name: str, d: dict) -> None:
    m = d["machine"]
    print(
        f"\n{name} ({m['gpu'] or 'CPU'}, suite {d.get('suite', 'reference')}, {d['seeds']} seeds, "
        f"{d['examples']} examples per check)\n"
    )
    print("\n".join(detection_table(d)))


def main() -> None:
    for name in ("detection-cuda-gpu.json", "detection-emulate-cpu.json"):
        d = load(name)
        if d and "summary" in d:
            detection(name, d)
        elif d:  # the previous release's format: median examples to the first finding
            print(f"\n{name} (previous release, {d['machine']['gpu'] or 'CPU'})\n")
            print("| variant | expected | found |")
            print("|---|---|---|")
            for r in d["rows"]:
                print(f"| {r['variant']} | {r['expected'] or 'none'} | {cell(r)} |")
    for name in ("throughput-cuda-gpu.json", "throughput-cuda-gpu-2.json", "throughput-emulate-cpu.json"):
        d = load(name)
        if d:
            print(f"\n{name} ({d['machine']['gpu'] or 'CPU'}, {d['examples']} examples of up to {d['steps']} steps)\n")
            print(
                "| variant | bare loop steps/s | graphsafe steps/s (worst) | ratio | default policies steps/s | ratio |"
            )
            print("|---|---|---|---|---|---|")
            for r in d["rows"]:
                print(
                    f"| {r['variant']} | {r['bare_steps_per_s']} | {r['graphsafe_steps_per_s']} | {r['ratio']} "
                    f"| {r.get('default_steps_per_s', '-')} | {r.get('default_ratio', '-')} |"
                )
    for name in ("scaling-1gpu-gpu.json", "scaling-2gpu-gpu.json", "scaling-2gpu-50ex-gpu.json", "scaling-cpu.json"):
        d = load(name)
        if d:
            extra = f" {d['pytest_args']}" if d.get("pytest_args") else ""
            print(
                f"\n{name} ({d['machine']['gpu'] or 'CPU'}, --graphsafe {' '.join(d['targets'])}{extra}, "
                f"{d['examples']} examples per item)\n"
            )
            print("| workers | wall s | speed-up | busy s per worker | outcome |")
            print("|---|---|---|---|---|")
            for r in d["rows"]:
                busy = ", ".join(f"{w['busy_s']}" for w in r.get("per_worker", {}).values())
                print(f"| {r['workers']} | {r['seconds']} | {r['speedup']}x | {busy} | {r['summary']} |")

    d = load("suite-timeline-cuda-gpu.json")
    if d:
        print(
            f"\nsuite-timeline-cuda-gpu.json ({d['machine']['gpu']}, pytest -n {d['workers']} --graphsafe all, "
            f"{d['examples']} examples per item; seconds)\n"
        )
        print("| code | wall | controller | workers | to first item | items | end | sum of items |")
        print("|---|---|---|---|---|---|---|---|")
        for r in d["rows"]:
            print(
                f"| {r.get('code', r.get('run'))} | {r['wall_s']} | {r['controller_s']} | {r['workers_s']} | {r['first_item_s']} "
                f"| {r['items_s']} | {r['end_s']} | {r['items_sum_s']} |"
            )

    d = load("gpu-sharing-gpu.json")
    if d:
        print(f"\ngpu-sharing-gpu.json ({d['machine']['gpu']}, {d['seconds']} s per point)\n")
        print("| loop | processes | total per s | per process per s |")
        print("|---|---|---|---|")
        for r in d["rows"]:
            what = "replay 20 kernels + synchronize" if r["kind"] == "gpu" else "CPU-only control"
            print(f"| {what} | {r['procs']} | {r['total_per_s']} | {r['per_process_per_s']} |")

    for name in ("state-size-emulate-before-cpu.json", "state-size-emulate-cpu.json", "state-size-cuda-gpu.json"):
        d = load(name)
        if d:
            print(
                f"\n{name} ({d['machine']['gpu'] or 'CPU'}, {d['examples']} examples, {d.get('code', 'this code')})\n"
            )
            print("\n".join(state_size.table(d["rows"])))


if __name__ == "__main__":
    main()

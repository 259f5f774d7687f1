"""Merge engine campaign results (vLLM's or SGLang's): a later run's rows replace an earlier run's rows of the same
target and release.

    python3 benchmarks/vllm_merge.py BASE.json NEW.json [NEW.json ...] --out FILE

A row of a NEW file (``benchmarks/vllm_campaign.py`` or ``benchmarks/sglang_campaign.py`` output) replaces BASE's
row for the same target and engine release (the row's ``vllm`` or ``sglang`` key), unless every seed of it says
``not run``.  Every row keeps the machine it ran on (``gpu``, ``when``:
rows that lack them get their file's).  ``machine`` becomes the newest file's, ``machines`` lists every machine
the rows ran on, and ``summary`` (vLLM's backends clean in every seed, buggy variants exact in every seed) is
recomputed from the rows.  Every other key of BASE (classifications, notes) is kept as it is.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _placed(row: dict, machine: dict) -> dict:
    row.setdefault("gpu", machine.get("gpu"))
    row.setdefault("when", machine.get("when"))
    return row


#: the row key that holds the engine's release, by engine
ENGINES = ("vllm", "sglang")


def release_key(rows: list[dict]) -> str:
    """Which engine's release the rows carry (``vllm`` or ``sglang``; ``vllm`` when no row says)."""
    return next((k for r in rows for k in ENGINES if k in r), "vllm")


def _ran(row: dict) -> bool:
    return any(kinds != ["not run"] for kinds in row["found"])


def summary(rows: list[dict], release: str = "vllm") -> dict:
    """Which rows are clean (no expected kind) or exact (a buggy variant) in every seed, and which are not.  A seed
    that did not run (the campaign's budget was spent) counts neither way: a row right in every seed that ran, with
    some not run, is ``..._where_run``, and ``seeds_not_run`` says how many.  ``release``: the rows' release key."""
    out: dict[str, list[str]] = {
        "stock_clean_every_seed": [],
        "stock_clean_where_run": [],
        "stock_with_findings": [],
        "buggy_exact_every_seed": [],
        "buggy_exact_where_run": [],
        "buggy_not_exact": [],
        "seeds_not_run": [],
    }
    for r in rows:
        label = f"{r['target']} {r[release]}"
        ran = [k for k in r["found"] if k != ["not run"]]
        good = bool(ran) and all(set(k) == set(r["expected"]) for k in ran)
        partial = len(ran) < len(r["found"])
        if r["expected"]:
            key = ("buggy_exact_where_run" if partial else "buggy_exact_every_seed") if good else "buggy_not_exact"
        else:
            key = ("stock_clean_where_run" if partial else "stock_clean_every_seed") if good else "stock_with_findings"
        out[key].append(label)
        if partial:
            out["seeds_not_run"].append(f"{label}: {len(r['found']) - len(ran)} of {len(r['found'])}")
    return out


def merge(base: dict, news: list[dict]) -> dict:
    key = release_key(base["rows"] + [r for new in news for r in new["rows"]])
    rows = [_placed(dict(r), base.get(f"machine_{r[key].rsplit('.', 1)[0]}", base["machine"])) for r in base["rows"]]
    machine = base["machine"]
    for new in news:
        machine = new["machine"]
        for r in new["rows"]:
            if not _ran(r):
                continue
            r = _placed(dict(r), new["machine"])
            same = [i for i, old in enumerate(rows) if (old["target"], old[key]) == (r["target"], r[key])]
            if same:
                rows[same[0]] = r
            else:
                rows.append(r)
    gpus = sorted({r["gpu"] for r in rows if r.get("gpu")})
    merged = {k: v for k, v in base.items() if not k.startswith("machine")}
    merged.update(
        machine=machine,
        machines=gpus,
        rows=rows,
        summary=summary(rows, key),
    )
    merged[key] = sorted({r[key] for r in rows})
    return {"machine": merged.pop("machine"), **merged}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("new", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    merged = merge(json.loads(Path(a.base).read_text()), [json.loads(Path(p).read_text()) for p in a.new])
    Path(a.out).write_text(json.dumps(merged, indent=1) + "\n")
    for k, v in merged["summary"].items():
        print(f"{k}: {', '.join(v) or '-'}")


if __name__ == "__main__":
    main()

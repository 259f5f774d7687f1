"""The tables of ``benchmarks/results/*.json``, as data: one home for how each result file reads.

``python benchmarks/tables.py`` prints them as Markdown and the documentation's Benchmarks page
(``docs/benchmarks.md``, through ``docs/_ext/graphsafe_docs.py``) renders them at build time; the
measuring scripts print their own file's table with :func:`tables_of` too.  Plain JSON in, strings
out: this module imports neither torch nor graphsafe.

Each result file is rendered by the renderer whose pattern matches its name (:data:`RENDERERS`); a
file no pattern matches is an error (:func:`tables_of` raises), so a new kind of result needs a
renderer here before it can be shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RESULTS", "Table", "RENDERERS", "machine", "provenance", "tables_of", "markdown", "load", "result_files"]

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Table:
    """One table of a result file: a caption, a header, rows of cells, and lines said before it."""

    caption: str
    header: list[str]
    rows: list[list[str]]
    lines: list[str] = field(default_factory=list)

    def markdown(self) -> list[str]:
        out = [*self.lines, ""] if self.lines else []
        out += [f"| {' | '.join(self.header)} |", "|" + "---|" * len(self.header)]
        out += [f"| {' | '.join(row)} |" for row in self.rows]
        return out


def load(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def result_files(results: Path = RESULTS) -> list[Path]:
    """Every result file, sorted by name."""
    return sorted(results.glob("*.json"))


def _num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:.0f}"
    return str(x)


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def machine(d: dict[str, Any]) -> str:
    """The machine a result was measured on, in one line."""
    m = d.get("machine") or {}
    if m.get("gpu"):
        count = m.get("gpu_count")
        where = f"{count}x {m['gpu']}" if count and count > 1 else m["gpu"]
    else:
        where = "CPU only"
    parts = [where, f"{m['cpu_count']} CPUs" if m.get("cpu_count") else None]
    parts += [f"{k} {m[k]}" for k in ("python", "torch", "triton") if m.get(k)]
    if d.get("flashinfer"):
        parts.append(f"flashinfer-python {d['flashinfer']}")
    return ", ".join(p for p in parts if p)


def provenance(d: dict[str, Any], commit: bool = True) -> dict[str, str]:
    """``machine``, ``commit`` and ``date`` of a result, where the file records them; ``commit=False`` leaves the
    commit out (the documentation names the machine and date; the file keeps the commit)."""
    out = {"machine": machine(d)}
    run = d.get("run") or {}
    code = (run.get("commit") or d.get("head_commit") or d.get("code")) if commit else None
    if code:
        code = str(code)
        short = re.fullmatch(r"[0-9a-f]{40}", code)
        out["commit"] = (code[:7] if short else code) + (" (uncommitted changes)" if run.get("dirty") else "")
    when = (d.get("machine") or {}).get("when")
    if when:
        out["date"] = str(when)[:10]
    return out


# -- one renderer per kind of result ---------------------------------------------------------------


def _detection(d: dict[str, Any]) -> list[Table]:
    s = d["summary"]
    rm = s.get("replay_mismatch") or {}
    lines = [
        f"`benchmarks/detection.py --engine {d['engine']} --suite {d.get('suite', 'reference')}`: "
        f"{d['seeds']} seed(s) of {d['examples']} examples per buggy target, {d['fixed_examples']} per safe one.",
        f"Recall {s['recall']}/{s['buggy']}, precision {s['precision']}/{s['buggy']}, "
        f"false positives {s['false_positives']}/{s['safe']} safe targets.",
    ]
    if "all" in rm:
        lines.append(
            f"`replay-mismatch` (a difference no probe explained): {rm['all']['replay_mismatch']} of "
            f"{rm['all']['findings']} findings."
        )
    if s.get("capture_dependent_rates"):
        rates = ", ".join(f"`{k}` {v}" for k, v in s["capture_dependent_rates"].items())
        lines.append(f"Capture-dependent hazards, seeds in which each was found: {rates}.")
    if d.get("rate_seeds", 0) and all("seeds" in r for r in d["rows"]):  # a rate run: the rates are the table
        rows = [
            [
                f"`{r['target']}`",
                ", ".join(r["expected"]) or "none",
                f"{sum(1 for x in r['seeds'] if x['kinds'] == r['expected'])}/{len(r['seeds'])}",
                _num(r.get("median_examples")),
            ]
            for r in d["rows"]
        ]
        return [
            Table(
                "Seeds in which each target got exactly its kind",
                ["target", "expected", "exact in", "median examples to find"],
                rows,
                lines,
            )
        ]
    rows = []
    for r in d["rows"]:
        seeds = r.get("seeds") or []
        seconds = r.get("seconds")
        if seconds is None and seeds:
            seconds = sorted(x["seconds"] for x in seeds)[len(seeds) // 2]
        found = [f for x in seeds[:1] for f in x.get("found", [])]
        where = "; ".join(_short(f["where"]) for f in found if f.get("where"))
        rows.append(
            [
                f"`{r['target']}`",
                ", ".join(r["expected"]) or "none",
                ", ".join(r["kinds"]) or "none",
                where or "-",
                _num(r.get("median_examples")),
                _num(seconds),
            ]
        )
    header = ["target", "expected", "found", "where (first seed)", "examples to find", "seconds"]
    return [Table("Verdict per target", header, rows, lines)]


def _throughput(d: dict[str, Any]) -> list[Table]:
    lines = [
        f"`benchmarks/throughput.py --engine {d['engine']} --examples {d['examples']}`: steps per second of a "
        f"check against the bare loop (capture once, then prepare, replay and compare with eager, no "
        f"graphsafe), {d['examples']} examples of up to {d['steps']} steps"
        + (f", best of {d['repeat']} rounds" if d.get("repeat") else "")
        + "."
    ]
    if d.get("note"):
        lines.append(d["note"])
    header = ["backend", "bare loop steps/s", "`worst` steps/s", "ratio", "default policies steps/s", "ratio"]
    rows = [
        [
            f"`{r['variant']}`",
            _num(r["bare_steps_per_s"], 4),
            _num(r["graphsafe_steps_per_s"], 4),
            _num(r["ratio"]),
            _num(r.get("default_steps_per_s"), 4),
            _num(r.get("default_ratio")),
        ]
        for r in d["rows"]
    ]
    if any("ratio_median_of_rounds" in r for r in d["rows"]):
        header += ["median of paired ratios (worst, default)"]
        for row, r in zip(rows, d["rows"]):
            row.append(f"{_num(r.get('ratio_median_of_rounds'))}, {_num(r.get('default_ratio_median_of_rounds'))}")
    return [Table("Steps per second", header, rows, lines)]


def _throughput_ab(d: dict[str, Any]) -> list[Table]:
    lines = [
        f"`benchmarks/throughput_ab.py --engine {d['engine']} --examples {d['examples']}`: this tree and a baseline, "
        "each in a warm process of its own, rounds alternating between them (bare loop, `worst` check, default check); "
        "per tree the median of its rounds' ratios to its own bare loop, and the median over pairs of rounds of this "
        "tree's ratio minus the baseline's."
    ]
    if d.get("note"):
        lines.append(d["note"])
    header = ["baseline", "when", "backend", "rounds", "`worst`: here, baseline", "paired difference"]
    header += ["default: here, baseline", "paired difference", "bare loop steps/s"]
    rows = []
    for run in d["runs"]:
        for r in run["rows"]:
            w, df = r["worst"], r["default"]
            bare = [x for v in r["bare_steps_per_s"].values() for x in v]
            rows.append(
                [
                    _short(run["label"], 32),
                    str(run.get("when", "-"))[:16],
                    f"`{r['variant']}`",
                    str(run["rounds"]),
                    f"{_num(w['this_median'])}, {_num(w['baseline_median'])}",
                    f"{w['paired_difference_median']:+.3f}",
                    f"{_num(df['this_median'])}, {_num(df['baseline_median'])}",
                    f"{df['paired_difference_median']:+.3f}",
                    f"{min(bare):.0f}-{max(bare):.0f}" if bare else "-",
                ]
            )
    return [Table("Paired rounds, this tree against a baseline", header, rows, lines)]


def _cpu_time(d: dict[str, Any]) -> list[Table]:
    base, head = d["runs"]["base"], d["runs"]["head"]
    lines = [
        f"`benchmarks/cpu_time.py`: `{d['command']}` over {len(d['names'])} reference variants, this tree "
        f"against an earlier commit (the file's `base_commit`), {d['rounds']} alternating rounds each.",
        f"Median wall time {d['base_seconds']} s against {d['head_seconds']} s: a ratio of **{d['ratio']}**; "
        + (
            "the same verdict for every variant."
            if d.get("same_verdicts")
            else f"verdicts differ: {d['differing_verdicts']}."
        ),
    ]
    rows = [
        [
            f"`{n}`",
            head[0]["verdicts"].get(n, "-"),
            ", ".join(_num(r["target_seconds"].get(n)) for r in base),
            ", ".join(_num(r["target_seconds"].get(n)) for r in head),
        ]
        for n in d["names"]
    ]
    return [Table("Seconds per variant", ["variant", "verdict", "earlier s", "this tree s"], rows, lines)]


def _engine_table(d: dict[str, Any]) -> list[Table]:
    engines = list(d["engines"])
    lines = [
        f"`benchmarks/engine_table.py`: the synthetic targets' verdicts per engine ({', '.join(f'{e} on {w}' for e, w in d['engines'].items())})."
    ]
    rows = [[f"`{r['target']}`", r["expected"] or "none", *[r.get(e) or "none" for e in engines]] for r in d["rows"]]
    return [Table("Verdict per engine", ["target", "expected", *engines], rows, lines)]


def _flashinfer(d: dict[str, Any]) -> list[Table]:
    seeds = d["seeds"]
    lines = [
        f"`benchmarks/flashinfer_campaign.py`: every FlashInfer target under the `{d['capture']}` capture policies, "
        f"{d['examples']} examples, seeds {', '.join(map(str, seeds))}, each check in a process of its own."
    ]
    rows = []
    for r in d["rows"]:
        found = ["; ".join(f) or "none" for f in r["found"]]
        rows.append(
            [
                f"`{r['target']}`",
                ", ".join(r["expected"]) or "none",
                *found,
                ", ".join(_num(s) for s in r["seconds"]),
                "yes" if r.get("exact") else "no",
            ]
        )
    header = ["target", "expected", *[f"seed {s}" for s in seeds], "seconds", "exact"]
    return [Table("Findings per seed", header, rows, lines)]


def _gpu_sharing(d: dict[str, Any]) -> list[Table]:
    procs = sorted({r["procs"] for r in d["rows"]})
    lines = [
        f"`benchmarks/gpu_sharing.py`: K processes each replay a 20-kernel graph and synchronise, "
        f"{d['seconds']} s per point; totals over all processes."
    ]
    kinds = {"gpu": "replay 20 kernels + synchronize, per s", "cpu": "CPU-only control, per s"}
    rows = []
    for kind, label in kinds.items():
        by = {r["procs"]: r for r in d["rows"] if r["kind"] == kind}
        rows.append([label, *[_num(by[p]["total_per_s"], 6) if p in by else "-" for p in procs]])
    return [Table("Loops per second", ["loop", *[f"{p} process(es)" for p in procs]], rows, lines)]


def _guard_overhead(d: dict[str, Any]) -> list[Table]:
    lines = [
        f"`benchmarks/guard_overhead.py --engine {d['engine']}`: {d['replays']} replays per mode in "
        f"{d['rounds']} interleaved rounds, `sample` every {d['every']}; {d['steps']} served steps under `strict`."
    ]
    rows = [
        [
            f"`{r['variant']}`",
            f"{r['storages']} / {r['paths']}",
            f"{_num(r['unguarded_us_per_replay'], 4)} us",
            f"{_num(r['strict_check_us'])} us",
            f"{_num(r['sample_skip_ns'])} ns",
            f"{r['sample_overhead_pct']:+}%",
            f"{r['wrapped_overhead_pct']:+}%",
            f"{r['strict_overhead_pct']:+}%",
            f"{r['serve_steps']}, {r['serve_findings']}",
        ]
        for r in d["rows"]
    ]
    header = [
        "backend",
        "storages / paths",
        "unguarded replay",
        "strict check",
        "skipped sample call",
        "sample",
        "wrapped",
        "strict",
        "served steps, findings",
    ]
    return [Table("Wall-time overhead against unguarded replay", header, rows, lines)]


def _hypothesis_floor(d: dict[str, Any]) -> list[Table]:
    lines = [
        f"`benchmarks/hypothesis_floor.py`: Hypothesis alone (an empty test body) over a check's plans, "
        f"{d['examples']} examples of up to {d['steps']} steps."
    ]
    rows = [[f"`{r['variant']}`", str(r["steps"]), f"{r['us_per_example']}"] for r in d["rows"]]
    return [Table("Hypothesis per example", ["backend", "steps drawn", "us per example"], rows, lines)]


def _plugin_startup(d: dict[str, Any]) -> list[Table]:
    lines = [
        f"`benchmarks/plugin_startup.py`: `pytest` on a one-test directory, {d['runs']} runs per series, alternating; "
        f"the plugin adds {d['plugin_adds_s']} s (median) to a run that does not ask for graphsafe."
    ]
    rows = [[k, _num(v["median_s"]), _num(v["min_s"]), _num(v["max_s"])] for k, v in d["series"].items()]
    return [Table("pytest start-up", ["series", "median s", "min s", "max s"], rows, lines)]


def _scaling(d: dict[str, Any]) -> list[Table]:
    extra = f" {d['pytest_args']}" if d.get("pytest_args") else ""
    lines = [
        f"`benchmarks/scaling.py`: `pytest -n K --graphsafe {' '.join(d['targets'])}{extra}`, {d['examples']} "
        f"examples per target"
        + (f" under the `{d['profile']}` profile" if d.get("profile") else "")
        + ", after a warm-up run."
    ]
    if d.get("front") == "cli":
        lines[0] = (
            f"`benchmarks/scaling.py --cli`: `graphsafe check {' '.join(d['targets'])} --jobs K`, {d['examples']} "
            f"examples per target under the `{d['profile']}` profile; busy s is per GPU."
        )
    if d.get("note"):
        lines.append(d["note"])
    rows = []
    for r in d["rows"]:
        busy = ", ".join(_num(w["busy_s"]) for w in (r.get("per_worker") or {}).values())
        over = _num(r["over_busiest_s"]) if "over_busiest_s" in r else "-"
        rows.append([str(r["workers"]), _num(r["seconds"], 4), f"{_num(r['speedup'])}x", busy, over, r["summary"]])
    head = ["workers", "wall s", "speed-up", "busy s per worker", "wall less busiest s", "pytest's summary"]
    out = [Table("Workers", head, rows, lines)]
    names = ("controller_s", "workers_s", "first_item_s", "items_s", "end_s")
    split = [[str(r["workers"])] + [_num(r["phases"].get(n)) for n in names] for r in d["rows"] if r.get("phases")]
    if split:
        out.append(
            Table(
                "Where the wall time goes",
                ["workers", "controller start s", "workers start s", "to first item s", "items s", "end s"],
                split,
                [
                    "From a timeline of each run: pytest's own process until its configure hook; then until the "
                    "last worker's configure; then collection and the wait for the first sandbox until the first "
                    "item starts; the items; the workers' and the controller's shutdown."
                ],
            )
        )
    st = d.get("startup") or {}
    if st:
        srows = [[method, _num(v.get("first_s")), _num(v.get("median_s"))] for method, v in st.items()]
        out.append(
            Table(
                "Sandbox start-up",
                ["method", "first child s", "median child s"],
                srows,
                [
                    "Sandbox start-up (`Sandbox.start` until the child is ready): `spawn` starts every child cold; "
                    "`forkserver` starts its server with the first child and forks the later ones."
                ],
            )
        )
    return out


def _state_size(d: dict[str, Any]) -> list[Table]:
    gib, mib = 1 << 30, 1 << 20
    lines = [
        f"`benchmarks/state_size.py`: a safe target with one static KV cache of the given size, {d['examples']} "
        f"examples each in a fresh process; extra = peak - the baseline's peak - the graph instance's own cache "
        f"(goal: {d.get('goal', 'extra <= 1.5 x static')})."
    ]
    rows = []
    for r in d["rows"]:
        cuda = f"{r['peak_cuda'] / gib:.2f}" if r.get("peak_cuda") is not None else "-"
        found = ", ".join(r.get("kinds") or []) or (r.get("error") or "none")[:120]
        rows.append(
            [
                str(r["static_bytes"] // mib),
                f"{r.get('peak_rss', 0) / gib:.2f}",
                _num(r.get("ratio_rss")),
                cuda,
                _num(r.get("ratio_cuda")),
                _num(r.get("seconds")),
                _num(r.get("steps")),
                _num(r.get("compare_ms_per_step")),
                found,
            ]
        )
    header = [
        "static MiB",
        "peak RSS GiB",
        "extra RSS / static",
        "peak CUDA GiB",
        "extra CUDA / static",
        "s",
        "steps",
        "compare ms/step",
        "findings",
    ]
    return [Table("Memory and time per static size", header, rows, lines)]


def _run_label(row: dict[str, Any]) -> str:
    """A timeline row's run: its code is "COMMIT (before)" or "COMMIT (after)", and the tables show the part in
    brackets (the file keeps the commit)."""
    code = str(row.get("code", row.get("run", "")))
    return re.sub(r"^[0-9a-f]{7,40} \((.*)\)$", r"\1", code)


def _suite_timeline(d: dict[str, Any]) -> list[Table]:
    lines = [
        f"`benchmarks/suite_timeline.py`: where the wall time of `pytest -n {d['workers']} --graphsafe all "
        f"--graphsafe-examples {d['examples']}` goes, in seconds. {d.get('note', '')}".rstrip()
    ]
    keys = ["wall_s", "controller_s", "workers_s", "first_item_s", "items_s", "end_s", "items_sum_s"]
    rows = [[_run_label(r), *[_num(r[k], 4) for k in keys]] for r in d["rows"]]
    header = ["run", "wall", "controller", "workers", "to first item", "items", "end", "sum of items"]
    return [Table("Phases of a run", header, rows, lines)]


def _opaque_off(d: dict[str, Any]) -> list[Table]:
    lines = [
        f"`benchmarks/opaque_off.py`: every FlashInfer target, variant and graph-reader target with `{d['opaque']}` "
        f"(no `opaque_call` or `watch`: only the dispatcher, Triton and the graph reader see the backend), "
        f"`{d['capture']}` capture, seed {d['seed']}."
    ]
    if d.get("note"):
        lines.append(d["note"])
    rows = [
        [
            f"`{r['target']}`",
            ", ".join(r["expected"]) or "none",
            ", ".join(r["found"]) or "none",
            _short("; ".join(r.get("names") or []) or "-", 60),
        ]
        for r in d["rows"]
    ]
    return [Table("Verdicts with opaque calls off", ["target", "expected", "found", "names"], rows, lines)]


def _graph_reader(d: dict[str, Any]) -> list[Table]:
    lines = [
        f"`benchmarks/graph_reader.py`: what reading every captured graph back costs, {d['examples']} examples, "
        f"best of {d['repeat']}."
    ]
    rows = []
    for r in d["rows"]:
        on, off = r["on"], r["off"]
        rows.append(
            [
                f"`{r['target']}`",
                _num(on["seconds_per_capture"] * 1e3),
                _num(off["seconds_per_capture"] * 1e3),
                _num(on.get("read_ms")),
                _num(on.get("map_ms")),
                f"{_num(on['dead_inputs_us'])} / {_num(off['dead_inputs_us'])}",
                f"{_num(on['check_seconds'])} / {_num(off['check_seconds'])}",
            ]
        )
    header = ["target", "capture ms, on", "capture ms, off", "read ms", "map ms", "per-step check us", "check s"]
    return [Table("Reader on and off", header, rows, lines)]


def _conformance(d: dict[str, Any]) -> list[Table]:
    s = d["summary"]
    engines = [e for e in ("cuda", "cuda_engine", "emulate") if e in s]
    lines = [f"`benchmarks/conformance.py`: {s['cases']} one-op conformance cases (`tests/targets/conformance/`)."]
    if "agree" in s:
        lines.append(
            f"The emulator agrees with `{s['table']}` on {s['agree']} of {s['cases']} cases; "
            f"{len(s.get('false_findings') or [])} false findings."
        )
    if "cuda_engine_agrees" in s:
        lines.append(
            f"graphsafe's CUDA engine agrees with a bare `torch.cuda.graph` on {s['cuda_engine_agrees']} of {s['cases']}."
        )
    families: dict[str, dict[str, dict[str, int]]] = {}
    for c in d["cases"]:
        for e in engines:
            v = (c.get(e) or {}).get("verdict", "-")
            fam = families.setdefault(c["family"], {}).setdefault(e, {})
            fam[v] = fam.get(v, 0) + 1
    rows = [
        [f"`{f}`", *[", ".join(f"{v} {n}" for v, n in sorted(per.get(e, {}).items())) for e in engines]]
        for f, per in sorted(families.items())
    ]
    return [Table("Verdicts per family of cases", ["family", *engines], rows, lines)]


def _vllm(d: dict[str, Any]) -> list[Table]:
    """An engine's campaign (``benchmarks/vllm_campaign.py``, ``benchmarks/sglang_campaign.py``): one row per target
    and engine release."""
    engine = "sglang" if "sglang" in d else "vllm"
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    lines = [
        f"`benchmarks/{engine}_campaign.py`: {name}'s own attention backends and deliberate mistakes in {name}'s real "
        f"classes, {d['examples']} examples, {d['seeds']} seeds, `{d['capture']}` capture policies, each check isolated."
    ]
    rows = []
    for r in d["rows"]:
        found = ["; ".join(f) or "none" for f in r["found"]]
        rows.append(
            [
                f"`{r['target']}`",
                r[engine],
                ", ".join(r["expected"]) or "none",
                " / ".join(found) or "not run",
                ", ".join(_num(x) for x in r.get("seconds") or []) or "-",
            ]
        )
    tables = [Table("Findings per seed", ["target", name, "expected", "found (per seed)", "seconds"], rows, lines)]
    cls = d.get("classification") or {}
    if cls:
        tables.append(
            Table(
                "Findings classified by hand",
                ["backend", "classification"],
                [[f"`{k}`", _short(v, 160)] for k, v in cls.items()],
            )
        )
    return tables


def _mutants(d: dict[str, Any]) -> list[Table]:
    s = d["summary"]
    lines = [
        f"`benchmarks/mutants.py`: {s['mutants']} mutants of graphsafe's safe targets, `{d['engine']}` engine, "
        f"{d['examples']} examples, seeds {d['seeds']}; ground truth by replay against eager per step. "
        f"Real {s['real']}: detected {s['detected']}, right kind {s['right_kind']}. "
        f"Equivalent {s['equivalent']}: with a finding {s['false_on_equivalent']}. "
        f"Controls (the subjects themselves) clean: {s['controls_clean']} of {s['controls']}."
    ]
    oracle = d.get("oracle") or {}
    if oracle:
        right = [
            n for n, r in oracle.items() if isinstance(r, dict) and (r.get("truth") == "real") == bool(r["expected"])
        ]
        lines.append(
            f"The ground truth called {len(right)} of graphsafe's {len(oracle)} registered targets as registered "
            "(buggy variants real, safe targets equivalent)."
        )
    if d.get("note"):
        lines.append(d["note"])
    per_op: dict[str, list[int]] = {}
    for r in d["rows"]:
        real = r["truth"].get("truth") == "real"
        c = per_op.setdefault(r["operator"], [0, 0, 0, 0, 0])
        c[0 if real else 3] += 1
        c[1] += bool(r.get("detected"))
        c[2] += bool(r.get("right_kind"))
        c[4] += bool(r.get("false_on_equivalent"))
    ops = d.get("operators") or {}
    by_op = [
        [f"`{op}`", (ops.get(op) or {}).get("expected") or "none", *[str(x) for x in c]] for op, c in per_op.items()
    ]
    header = ["operator", "expected", "real", "detected", "right kind", "equivalent", "with a finding"]
    tables = [Table("Per operator", header, by_op, lines)]
    odd = [
        r
        for r in d["rows"]
        if (r["truth"].get("truth") == "real" and not r.get("right_kind"))
        or r.get("false_on_equivalent")
        or r["truth"].get("truth") not in ("real", "equivalent")
    ]
    rows = [
        [
            f"`{r['subject']}`",
            f"`{r['operator']}`",
            f"`{r['buffer']}`" if r.get("buffer") else "-",
            str(r["truth"].get("truth") or r["truth"].get("error")),
            r["expected"] or "none",
            " / ".join(", ".join(k) or "none" for k in r.get("found") or []) or "not run",
            ", ".join(_num(x) for x in r.get("seconds_to_first") or []) or "-",
            ", ".join(_num(x) for x in r.get("seconds_to_verdict") or []) or "-",
        ]
        for r in odd
    ] or [["(none)", "-", "-", "-", "-", "-", "-", "-"]]
    header = ["subject", "operator", "buffer", "truth", "expected", "found (per seed)", "s to first", "s to verdict"]
    tables.append(Table("Misses and false findings", header, rows))
    return tables


#: file-name pattern -> renderer (the first match wins)
RENDERERS: list[tuple[str, Callable[[dict[str, Any]], list[Table]]]] = [
    (r"detection-.*\.json", _detection),
    (r"throughput-ab-.*\.json", _throughput_ab),
    (r"throughput-.*\.json", _throughput),
    (r"conformance-.*\.json", _conformance),
    (r"cpu-time-.*\.json", _cpu_time),
    (r"engine-table-.*\.json", _engine_table),
    (r"flashinfer-.*\.json", _flashinfer),
    (r"gpu-sharing-.*\.json", _gpu_sharing),
    (r"graph-reader-.*\.json", _graph_reader),
    (r"guard-overhead-.*\.json", _guard_overhead),
    (r"hypothesis-floor-.*\.json", _hypothesis_floor),
    (r"mutants-.*\.json", _mutants),
    (r"opaque-off-.*\.json", _opaque_off),
    (r"plugin-startup-.*\.json", _plugin_startup),
    (r"scaling-.*\.json", _scaling),
    (r"state-size-.*\.json", _state_size),
    (r"suite-timeline-.*\.json", _suite_timeline),
    (r"vllm-.*\.json", _vllm),
    (r"sglang-.*\.json", _vllm),
]


def tables_of(path: Path) -> list[Table]:
    """The tables of one result file; ``ValueError`` when no renderer knows its name."""
    path = Path(path)
    for pattern, render in RENDERERS:
        if re.fullmatch(pattern, path.name):
            return render(load(path))
    raise ValueError(f"{path.name}: no renderer in benchmarks/results_tables.py matches this result file's name")


def markdown(path: Path) -> str:
    """One result file as Markdown: its machine, commit and date, then its tables."""
    path = Path(path)
    lines = [f"## {path.name}", "", ", ".join(f"{k}: {v}" for k, v in provenance(load(path)).items())]
    for table in tables_of(path):
        lines += ["", table.caption, "", *table.markdown()]
    return "\n".join(lines)

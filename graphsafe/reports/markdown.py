"""``report.md``: the human-readable report, rendered from the same data as ``finding.json``."""

from __future__ import annotations

import json
import math
from typing import Any

from ..contract import Batch
from . import heatmap
from .jsonio import plain, pretty

__all__ = ["render"]

_POSITION_ORDER = ("request", "token", "block", "token_block", "first_token", "index", "graph", "eager", "note")


def _num(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.6g}"


def _code(s: Any) -> str:
    """An inline code span that survives backticks in ``s``."""
    s = str(s)
    if not s:
        return "-"
    fence = "``" if "`" in s else "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _cell(v: Any) -> str:
    if isinstance(v, list):
        v = "(" + ", ".join(_num(x) for x in v) + ")"
    else:
        v = _num(v)
    return v.replace("|", "\\|").replace("\n", " ")


def _json_block(value: Any) -> str:
    return "```json\n" + pretty(plain(value)) + "\n```"


def _batch_line(d: dict) -> str:
    try:
        return Batch.from_dict(d).short()
    except Exception:  # noqa: BLE001 - show what was recorded even if it is not a valid Batch any more
        return json.dumps(d)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return out


UNOWNED_NOTE = (
    "request -1 (and token_block / first_token -1): no live request of this step owns the block, "
    "so whatever differs there is stale state or was written through a padded slot."
)


def _heatmap_lines(hm: dict) -> list[str]:
    about = heatmap.describe(hm)
    rows, cols, step = len(hm["values"]), max(len(r) for r in hm["values"]), hm.get("col_step", 1)
    colour = (
        "Colour: white = no difference, pale yellow to dark red = larger |graph - eager| "
        f"(linear up to the largest finite difference, {about['max']}), magenta = NaN or infinite difference."
    )
    if about["row_kind"] == "token":
        return [
            f"![|graph - eager| over the live rows of {about['source']}](diff.png)",
            "",
            f"{rows} live rows of {_code(about['source'])} (labels rXtY = request X, token Y) x {cols} columns, "
            f"each the max over {step} output values; {hm.get('padded_rows', 0)} padded rows below them, drawn "
            f"as a hatched grey band (not compared). {colour}",
            "",
        ]
    what = (
        "KV blocks (labels bB rR/tbT = block B holds token block T of request R; bB none = no live request "
        "of this step owns block B: stale state or padding)"
        if about["row_kind"] == "block"
        else "rows (first dimension)"
    )
    return [
        f"![|graph - eager| of {about['source']}](diff.png)",
        "",
        f"The outputs agree; the static tensor {_code(about['source'])} differs. {rows} {what} x {cols} "
        f"columns, each the max over {step} values of the row. {colour}",
        "",
    ]


def render(data: dict[str, Any], *, report_dir: str = "") -> str:
    """Markdown for a finding's data (``finding.json`` content, with floats decoded)."""
    kind, target = data["kind"], data.get("target") or "(unnamed target)"
    L: list[str] = [f"# {kind}: {target}", ""]
    L += [
        f"**Kind:** {_code(kind)} ({data.get('severity', 'error')})  ",
        f"**Target:** {_code(target)}  ",
        f"**Where:** {_code(data.get('where') or '-')}  ",
        f"**Probe:** {_code(data.get('probe') or '-')}  ",
        f"**Engine:** {_code(data.get('engine') or '-')}  ",
    ]
    if data.get("examples_to_find"):
        secs = data.get("seconds_to_find")
        took = f" ({secs:.1f} s)" if isinstance(secs, (int, float)) and secs > 0 else ""
        L.append(f"**Found after:** {data['examples_to_find']} example(s){took}  ")
    L += ["", "## What this means", "", data.get("explanation", ""), ""]

    # -- where --------------------------------------------------------------------------------
    L += ["## At fault", "", f"- where: {_code(data.get('where') or '-')}", f"- message: {data.get('message', '')}", ""]
    details = data.get("details") or {}
    if details:
        L += ["Details:", "", _json_block(details), ""]
    if data.get("error"):
        L += ["Error:", "", "```text", data["error"].rstrip(), "```", ""]

    # -- capture ------------------------------------------------------------------------------
    L += ["## Capture", ""]
    spec = data.get("spec")
    if spec:  # the sizes are listed once below: the ones actually captured, not the spec's "() = default"
        L += _table(["field", "value"], [[k, v] for k, v in spec.items() if k != "capture_sizes"]) + [""]
    else:
        L += ["Capture spec: not recorded (the target's default spec).", ""]
    L.append(f"- capture size: {data.get('capture_size') or '-'}")
    cb = data.get("capture_batch")
    if cb:
        worst = data.get("capture_is_worst_case")
        how = {
            True: "the spec's worst case at this size",
            False: "a drawn (non-worst-case) capture batch",
            None: "unknown whether worst case",
        }[worst]
        L.append(f"- capture batch: {_code(_batch_line(cb))} ({how})")
    else:
        L.append("- capture batch: not recorded")
    if data.get("capture_sizes"):
        L.append(
            f"- capture sizes captured: {', '.join(str(s) for s in data['capture_sizes'])}"
            f" (from {data.get('capture_sizes_source', 'the finding')})"
        )
    L.append("")

    # -- steps --------------------------------------------------------------------------------
    L += ["## Steps (minimal, as shrunk)", ""]
    batches = data.get("batches") or []
    fail = data.get("step", -1)
    if batches:
        rows = []
        for i, b in enumerate(batches):
            rows.append([i, _batch_line(b), b.get("num_slots", ""), "**fails here**" if i == fail else ""])
        L += _table(["step", "batch", "slots", ""], rows) + [""]
        if 0 <= fail < len(batches):
            L.append(f"Step {fail} is the failing step.")
            L.append("")
        else:
            L += ["No step is marked: the finding arose before the first step ran (in setup or capture).", ""]
        L += ["Full batches (block tables included):", "", _json_block(batches), ""]
    else:
        L += ["No steps: the finding arises at capture, before any replay.", ""]

    # -- differences --------------------------------------------------------------------------
    L += ["## Differences (graph vs eager)", ""]
    mism = data.get("mismatches") or []
    if mism:
        L += [
            f"- max abs error: {_num(data.get('max_abs', 0.0))}",
            f"- max rel error: {_num(data.get('max_rel', 0.0))}",
            "",
        ]
        L += _table(
            ["tensor", "mismatched", "of", "max abs", "max rel"],
            [[m["tensor"], m["count"], m["total"], m["max_abs"], m["max_rel"]] for m in mism],
        ) + [""]
        for m in mism:
            first = [p for p in m.get("first") or [] if isinstance(p, dict)]
            if not first:
                continue
            keys = [k for k in _POSITION_ORDER if any(k in p for p in first)]
            keys += sorted({k for p in first for k in p} - set(keys))
            coords = "(request, token)" if "token" in keys else "(request, block)" if "block" in keys else ""
            L += [f"First mismatching positions in {_code(m['tensor'])} {coords}:".replace(" :", ":"), ""]
            L += _table(keys, [[p.get(k, "") for k in keys] for p in first]) + [""]
            if "block" in keys and any(p.get("request") == -1 for p in first):
                L += [UNOWNED_NOTE, ""]
    else:
        L += ["No output comparison was made for this finding.", ""]

    # -- heatmap ------------------------------------------------------------------------------
    L += ["## Heatmap", ""]
    hm = data.get("heatmap")
    if heatmap.usable(hm):
        L += _heatmap_lines(hm)
    else:
        L += [
            "No output diff is available for this finding (nothing was replayed and compared); "
            "`diff.png` only says so.",
            "",
        ]

    # -- environment --------------------------------------------------------------------------
    env = data.get("environment") or {}
    L += ["## Environment", ""]
    L += _table(
        ["", "version"],
        [
            ["engine", data.get("engine") or "-"],
            ["graphsafe", env.get("graphsafe", "-")],
            ["torch", env.get("torch", "-")],
            ["triton", env.get("triton") or "not importable"],
            ["Python", env.get("python", "-")],
            ["CUDA", env.get("cuda") or "-"],
            ["GPU", env.get("gpu", "-")],
            ["platform", env.get("platform", "-")],
        ],
    ) + [""]

    # -- fix ----------------------------------------------------------------------------------
    L += ["## How to fix", "", data.get("fix", ""), ""]

    # -- rerun --------------------------------------------------------------------------------
    where = report_dir or "<this directory>"
    L += [
        "## How to rerun",
        "",
        "From the project root (so that the target imports):",
        "",
        "```sh",
        f"python {where}/repro.py                   # replays on the recorded engine",
        f"python {where}/repro.py --engine emulate  # on the CPU emulator",
        f"graphsafe repro {where}",
        "```",
        "",
        "Exit status: 0 once fixed (the target runs every step, no finding left), 1 while this finding's kind "
        "reproduces, 2 if the repro cannot run (the target does not load), 3 if the target raises, crashes or hangs. "
        "`repro.py` embeds the steps and the spec as JSON (no pickles), so it can be kept as a regression test.",
        "",
    ]
    for warning in data.get("warnings") or []:
        L += [f"> **Note:** {warning}", ""]
    return "\n".join(L).rstrip() + "\n"

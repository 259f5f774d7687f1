"""Specifications for ``graphsafe.reports``: one directory per finding, written atomically.

* layout: ``<root>/<target slug>/<kind>-<short hash>/`` holds report.md, finding.json, repro.py, diff.png;
* content: report.md and finding.json say what, where, capture, steps, differences, versions, fix, rerun;
* round trip: ``load_finding`` rebuilds the Finding from plain JSON (schema_version 1 only);
* picture: diff.png is a valid PNG whose cells show the differences and the padded rows
  (more in test_diff_png.py);
* atomicity and deduplication: no partial directory, same key -> same directory, replaced;
* end to end: a report's repro exits 1 while the bug is there and 0 against the fixed twin.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import math
import os
import pickle
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
from PIL import Image  # matplotlib's own image library: decodes what diff.png holds

import graphsafe
from graphsafe import Batch, CaptureSpec, Finding, FindingKind, Mismatch, reports
from graphsafe.findings import EXPLANATIONS, FIXES
from graphsafe.reports import atomic, heatmap, jsonio, markdown, repro
from tests.subprocesses import REPO
from tests.targets import plain_torch as torch_targets

CAPTURE_SEED = 2**31 - 1
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# -- hand-built findings, one (at least) per kind ---------------------------------------------
SPEC = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=16, block_size=4)
WORST = SPEC.worst_case_batch(4, seed=CAPTURE_SEED)
DRAWN = Batch(query_lens=(1, 1), seq_lens=(5, 9), block_table=((1, 2), (3, 4, 5)), seed=77, num_slots=4)
STEPS = [
    Batch(query_lens=(1, 1, 1), seq_lens=(16, 12, 8), block_table=((1, 2, 3, 4), (5, 6, 7), (8, 9)), seed=3),
    Batch(query_lens=(2, 1), seq_lens=(9, 4), block_table=((1, 2, 3), (4,)), seed=4),
]
NAN = float("nan")
INF = float("inf")

OUTPUT_MISMATCH = Mismatch(
    tensor="output[0]",
    count=5,
    total=12,
    max_abs=INF,
    max_rel=INF,
    first=[
        {"index": [0, 3], "graph": 1.5, "eager": 0.5, "request": 0, "token": 0},
        {"index": [1, 0], "graph": NAN, "eager": 0.25, "request": 0, "token": 1},
        {"index": [2, 2], "graph": 4.0, "eager": -1.0, "request": 1, "token": 0},
    ],
)
STATIC_MISMATCH = Mismatch(
    tensor="static['kv_cache']",
    count=2,
    total=544,
    max_abs=0.75,
    max_rel=3.0,
    first=[
        {"index": [3, 0, 1], "graph": 1.0, "eager": 0.25, "block": 3, "request": 0, "token_block": 2, "first_token": 8}
    ],
)
HEATMAP = {
    "values": [[0.0, 0.5, 1.0, 0.0], [INF, 0.0, 0.25, 0.0], [0.0, 0.0, 5.0, 2.5]],
    "rows": ["r0t0", "r0t1", "r1t0"],
    "padded_rows": 5,
    "col_step": 2,
}
TRACEBACK = (
    'Traceback (most recent call last):\n  File "backend/attn.py", line 88, in forward\n'
    "    n = int(self.seq_lens.max().item())\nCaptureError: _local_scalar_dense reads data produced inside the graph\n"
)

# per kind: where, message, extra Finding fields
KINDS: dict[FindingKind, dict] = {
    FindingKind.CAPTURE_FAILURE: dict(
        where="backend/attn.py:88 in forward",
        message="capture of size 4 failed: CaptureError: _local_scalar_dense reads data produced inside the graph",
        error=TRACEBACK,
        details={"phase": "capture"},
        batches=[],
        step=-1,
    ),
    FindingKind.STALE_POINTER: dict(
        where="self.seq_lens",
        message="the graph reads freed memory: self.seq_lens (torch.int32, 16 bytes at 0x7f0010, read by aten::mul) "
        "was freed after capture; self.seq_lens now at 0x7f0400",
        capture_batch=DRAWN,
        details={
            "dead": [
                {
                    "path": "self.seq_lens",
                    "address": "0x7f0010",
                    "replacement": ["self.seq_lens now at 0x7f0400"],
                    "kernels": ["aten::mul"],
                }
            ]
        },
    ),
    FindingKind.UNPERSISTED_METADATA: dict(
        where="self.block_table",
        message="the graph reads self.block_table as captured, but this step's prepare() did not write it; this "
        "step's values went to new tensors at self.block_table",
        details={"buffers": ["self.block_table"], "new": ["self.block_table"]},
        mismatches=[OUTPUT_MISMATCH],
        heatmap=HEATMAP,
    ),
    FindingKind.LAZY_INIT: dict(
        where="self.plan",
        message="the graph reads self.plan, written only during warm-up",
        details={"buffers": ["self.plan"]},
        mismatches=[OUTPUT_MISMATCH],
        heatmap=HEATMAP,
    ),
    FindingKind.FROZEN_HOST_VALUE: dict(
        where="_attn_kernel.MAX_SEQ",
        message="_attn_kernel MAX_SEQ: captured 9, this batch needs 16 (at backend/attn.py:40 in forward)",
        capture_batch=DRAWN,
        details={
            "diffs": [
                {
                    "kind": "argument",
                    "kernel": "_attn_kernel",
                    "argument": "MAX_SEQ",
                    "captured": "9",
                    "needed": "16",
                    "where": "backend/attn.py:40 in forward",
                    "triton": True,
                }
            ]
        },
        mismatches=[OUTPUT_MISMATCH],
        heatmap=HEATMAP,
    ),
    FindingKind.STALE_PADDING: dict(
        where="self.seq_lens[2:4]",
        message="after an earlier, larger batch, padded slots 2..3 keep stale values in self.seq_lens[2:4]",
        details={"stale_buffers": ["self.seq_lens[2:4]"]},
        mismatches=[OUTPUT_MISMATCH],
        heatmap=HEATMAP,
    ),
    FindingKind.OUTPUT_NOT_WRITTEN: dict(
        where="output[0]",
        message="the replay leaves 5 of 12 live positions of output[0] unwritten",
        details={"unwritten": 5},
        mismatches=[OUTPUT_MISMATCH],
        heatmap=HEATMAP,
    ),
    FindingKind.NONDETERMINISTIC_REPLAY: dict(
        where="output[0]",
        message="two replays of the same batch differ in output[0] (5/12)",
        mismatches=[OUTPUT_MISMATCH],
        heatmap=HEATMAP,
    ),
    FindingKind.SUPPORT_MISMATCH: dict(
        where="FlashBackend.support",
        message="declared ALWAYS breaks (stale-padding), but UNIFORM_BATCH passes: declare support = "
        "Support.UNIFORM_BATCH",
        details={"declared": "ALWAYS", "passes": "UNIFORM_BATCH"},
        batches=[],
        step=-1,
        capture_batch=None,
        capture_size=0,
    ),
    FindingKind.REPLAY_MISMATCH: dict(
        where="static['kv_cache']",
        message="static['kv_cache'] differs from eager (2/544, max abs 0.75) and no probe explains why",
        mismatches=[OUTPUT_MISMATCH, STATIC_MISMATCH],
        heatmap=HEATMAP,
    ),
    FindingKind.TARGET_ERROR: dict(
        where="backend/attn.py:31 in prepare",
        message="prepare(batch) raised IndexError: index 5 is out of bounds for dimension 0 with size 4",
        error="Traceback (most recent call last):\nIndexError: index 5 is out of bounds for dimension 0 with size 4\n",
    ),
}


def make_finding(kind: FindingKind, **overrides) -> Finding:
    """A realistic finding of ``kind`` in the (made-up) target ``backend.attn:FlashBackend``."""
    fields = dict(
        kind=kind,
        target="backend.attn:FlashBackend",
        probe=kind.value,
        engine="emulate",
        spec=SPEC,
        capture_size=4,
        capture_batch=WORST,
        batches=list(STEPS),
        step=1,
        examples_to_find=7,
    )
    if "seconds_to_find" in {fl.name for fl in dataclasses.fields(Finding)}:
        fields["seconds_to_find"] = 1.25
    fields.update(KINDS[kind])
    fields.update(overrides)
    return Finding(**fields)


ALL_KINDS = list(FindingKind)
WITH_HEATMAP = [k for k in ALL_KINDS if KINDS[k].get("heatmap") is not None]
kinds = pytest.mark.parametrize("kind", ALL_KINDS, ids=[k.value for k in ALL_KINDS])


def write(kind: FindingKind, root: Path, **overrides) -> Path:
    return reports.write_report(make_finding(kind, **overrides), root)


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith((atomic.TMP_PREFIX, atomic.OLD_PREFIX)))


# -- PNG reading ------------------------------------------------------------------------------
def read_png(data: bytes):
    """(width, height, pixel(x, y)) after checking signature, chunk CRCs, IHDR and the decoded size."""
    assert data[:8] == PNG_SIGNATURE
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        tag, payload = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n : pos + 12 + n])
        assert zlib.crc32(tag + payload) & 0xFFFFFFFF == crc, f"bad CRC in {tag!r}"
        chunks.append((tag, payload))
        pos += 12 + n
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height, depth, _colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, interlace) == (8, 0)  # 8 bits per channel, not interlaced
    image = Image.open(io.BytesIO(data))
    image.load()
    assert image.size == (width, height)
    rgb = image.convert("RGB")

    def pixel(x: int, y: int) -> tuple[int, int, int]:
        return rgb.getpixel((x, y))

    return width, height, pixel


def recipe_of(script: str) -> dict:
    """The RECIPE JSON literal embedded in a repro.py."""
    for node in ast.parse(script).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["RECIPE"]:
            return json.loads(node.value.args[0].value)
    raise AssertionError("repro.py has no RECIPE = json.loads(...) literal")


# == layout ====================================================================================
def test_write_report_creates_target_slug_kind_hash_directory(tmp_path):
    f = make_finding(FindingKind.LAZY_INIT)
    path = reports.write_report(f, tmp_path)
    assert path == tmp_path / "backend.attn_FlashBackend" / f"lazy-init-{f.short_hash}"
    assert path == reports.report_path(f, tmp_path)


@kinds
def test_report_directory_holds_the_four_files(tmp_path, kind):
    path = write(kind, tmp_path)
    assert sorted(p.name for p in path.iterdir()) == sorted(reports.REPORT_FILES)


def test_check_stores_the_report_directory_in_the_finding(fresh_check):
    result, root = fresh_check
    (f,) = result.findings
    assert Path(f.report_dir) == reports.report_path(f, root)
    assert (Path(f.report_dir) / "finding.json").is_file()


# == report.md =================================================================================
@kinds
def test_report_md_names_kind_target_where_and_message(tmp_path, kind):
    f = make_finding(kind)
    md = (reports.write_report(f, tmp_path) / "report.md").read_text()
    assert md.startswith(f"# {kind.value}: {f.target}")
    assert f.where in md
    assert f.message in md


@kinds
def test_report_md_explains_the_hazard_and_how_to_fix_it(tmp_path, kind):
    md = (write(kind, tmp_path) / "report.md").read_text()
    assert EXPLANATIONS[kind] in md
    assert FIXES[kind] in md


def test_report_md_shows_details_and_error_traceback(tmp_path):
    md = (write(FindingKind.CAPTURE_FAILURE, tmp_path) / "report.md").read_text()
    assert '"phase": "capture"' in md
    assert "n = int(self.seq_lens.max().item())" in md


def test_report_md_shows_kernel_argument_at_fault(tmp_path):
    md = (write(FindingKind.FROZEN_HOST_VALUE, tmp_path) / "report.md").read_text()
    assert "`_attn_kernel.MAX_SEQ`" in md
    assert '"argument": "MAX_SEQ"' in md


def test_report_md_lists_capture_spec_size_and_batch(tmp_path):
    md = (write(FindingKind.LAZY_INIT, tmp_path) / "report.md").read_text()
    for field, value in [
        ("max_reqs", 4),
        ("max_query_len", 2),
        ("max_seq_len", 16),
        ("block_size", 4),
        ("num_blocks", 17),
    ]:
        assert f"| {field} | {value} |" in md
    assert "- capture size: 4" in md
    assert WORST.short() in md
    assert "worst case" in md


def test_report_md_says_when_the_capture_batch_was_drawn(tmp_path):
    md = (write(FindingKind.FROZEN_HOST_VALUE, tmp_path) / "report.md").read_text()
    assert DRAWN.short() in md
    assert "drawn" in md


def test_report_md_lists_every_step_and_marks_the_failing_one(tmp_path):
    md = (write(FindingKind.STALE_PADDING, tmp_path) / "report.md").read_text()
    assert f"| 0 | {STEPS[0].short()} | 3 |  |" in md
    assert f"| 1 | {STEPS[1].short()} | 2 | **fails here** |" in md
    assert "Step 1 is the failing step." in md


def test_report_md_says_capture_findings_have_no_steps(tmp_path):
    md = (write(FindingKind.CAPTURE_FAILURE, tmp_path) / "report.md").read_text()
    assert "No steps: the finding arises at capture" in md


def test_report_md_gives_max_errors_and_first_positions_as_request_token(tmp_path):
    md = (write(FindingKind.REPLAY_MISMATCH, tmp_path) / "report.md").read_text()
    assert "- max abs error: inf" in md
    assert "| output[0] | 5 | 12 | inf | inf |" in md
    assert "| request | token | index | graph | eager |" in md
    assert "| 0 | 1 | (1, 0) | nan | 0.25 |" in md
    assert "| 1 | 0 | (2, 2) | 4 | -1 |" in md
    # a static tensor's positions are located by block
    assert "| request | block | token_block | first_token | index | graph | eager |" in md


@kinds
def test_report_md_records_engine_and_versions(tmp_path, kind):
    md = (write(kind, tmp_path) / "report.md").read_text()
    assert "| engine | emulate |" in md
    assert f"| torch | {torch.__version__} |" in md
    assert f"| Python | {sys.version.split()[0]} |" in md
    assert f"| graphsafe | {graphsafe.__version__} |" in md
    assert "| triton |" in md
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none (CPU)"
    assert f"| GPU | {gpu} |" in md


@kinds
def test_report_md_explains_how_to_rerun(tmp_path, kind):
    path = write(kind, tmp_path)
    md = (path / "report.md").read_text()
    assert f"python {path}/repro.py" in md
    assert f"graphsafe repro {path}" in md
    assert "--engine emulate" in md


def test_report_md_embeds_the_heatmap_with_padded_rows_explained(tmp_path):
    md = (write(FindingKind.STALE_PADDING, tmp_path) / "report.md").read_text()
    assert "](diff.png)" in md
    assert "5 padded rows" in md


def test_report_md_says_no_diff_is_available_without_heatmap(tmp_path):
    md = (write(FindingKind.CAPTURE_FAILURE, tmp_path) / "report.md").read_text()
    assert "No output diff is available" in md
    assert "](diff.png)" not in md


# == finding.json ==============================================================================
def _strict_json(text: str):
    def reject(token):
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(text, parse_constant=reject)


@kinds
def test_finding_json_is_strict_json_with_schema_version_1(tmp_path, kind):
    data = _strict_json((write(kind, tmp_path) / "finding.json").read_text())
    assert data["schema_version"] == reports.SCHEMA_VERSION == 1
    assert data["kind"] == kind.value


def test_finding_json_holds_what_report_md_shows(tmp_path):
    data = _strict_json((write(FindingKind.REPLAY_MISMATCH, tmp_path) / "finding.json").read_text())
    assert data["explanation"] == EXPLANATIONS[FindingKind.REPLAY_MISMATCH]
    assert data["fix"] == FIXES[FindingKind.REPLAY_MISMATCH]
    assert data["environment"]["torch"] == torch.__version__
    assert data["environment"]["python"] == sys.version.split()[0]
    assert data["capture_is_worst_case"] is True
    assert data["capture_sizes"] == [1, 2, 4]
    assert data["max_abs"] == {"$float": "inf"}


def _same_floats(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_floats(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_floats(x, y) for x, y in zip(a, b))
    return a == b


@kinds
def test_load_finding_round_trips_the_finding(tmp_path, kind):
    f = make_finding(kind)
    path = reports.write_report(f, tmp_path)
    g = reports.load_finding(path)
    for field in dataclasses.fields(Finding):  # every field, including any added later
        if field.name not in ("mismatches", "heatmap", "details", "report_dir"):
            assert getattr(g, field.name) == getattr(f, field.name), field.name
    assert g.key == f.key and g.short_hash == f.short_hash
    assert all(isinstance(m, Mismatch) for m in g.mismatches)
    assert _same_floats([m.to_dict() for m in g.mismatches], [m.to_dict() for m in f.mismatches])
    assert _same_floats(g.heatmap, f.heatmap)
    assert {k: v for k, v in g.details.items() if k != "capture_sizes"} == f.details
    assert g.report_dir == str(path)


def test_load_finding_records_the_capture_sizes_in_details(tmp_path):
    g = reports.load_finding(write(FindingKind.LAZY_INIT, tmp_path))
    assert g.details["capture_sizes"] == list(SPEC.default_capture_sizes())


def test_load_finding_accepts_the_directory_its_json_or_a_file_beside_it(tmp_path):
    path = write(FindingKind.LAZY_INIT, tmp_path)
    key = reports.load_finding(path).key
    assert reports.load_finding(path / "finding.json").key == key
    assert reports.load_finding(path / "repro.py").key == key


def test_load_finding_rejects_another_schema_version(tmp_path):
    path = write(FindingKind.LAZY_INIT, tmp_path)
    data = json.loads((path / "finding.json").read_text())
    data["schema_version"] = 2
    (path / "finding.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="schema_version 2.*reads schema_version 1"):
        reports.load_finding(path)


def test_load_finding_rejects_a_pickle_without_unpickling_it(tmp_path, monkeypatch):
    path = write(FindingKind.LAZY_INIT, tmp_path)
    (path / "finding.json").write_bytes(pickle.dumps(make_finding(FindingKind.LAZY_INIT)))

    def no_unpickling(*a, **k):
        raise AssertionError("load_finding unpickled")

    monkeypatch.setattr(pickle, "loads", no_unpickling)
    monkeypatch.setattr(pickle, "load", no_unpickling)
    with pytest.raises(ValueError, match="not valid JSON"):
        reports.load_finding(path)


def test_load_finding_rejects_json_that_is_not_a_finding(tmp_path):
    (tmp_path / "finding.json").write_text(json.dumps({"schema_version": 1, "kind": "stale-pointer"}))
    with pytest.raises(ValueError, match="missing message, target, where"):
        reports.load_finding(tmp_path)


# == diff.png ==================================================================================
@pytest.mark.parametrize("kind", WITH_HEATMAP, ids=[k.value for k in WITH_HEATMAP])
def test_diff_png_is_a_valid_png_sized_by_the_layout(tmp_path, kind):
    data = (write(kind, tmp_path) / "diff.png").read_bytes()
    width, height, _ = read_png(data)
    picture = heatmap.draw(HEATMAP, title=kind.value)
    assert (width, height) == picture.size and data == picture.png
    # 4 columns, 3 live + 5 padded rows: every cell at least 8 pixels a side
    (x0, y0), (x1, y1) = picture.cell_centre(0, 0), picture.cell_centre(7, 3)
    assert (x1 - x0) / 3 >= 8 and (y1 - y0) / 7 >= 8


def test_diff_png_draws_zero_white_max_dark_red_and_nan_magenta(tmp_path):
    _, _, pixel = read_png((write(FindingKind.STALE_PADDING, tmp_path) / "diff.png").read_bytes())
    picture = heatmap.draw(HEATMAP, title="stale-padding")
    assert pixel(*picture.cell_centre(0, 0)) == heatmap.ZERO_COLOUR == (255, 255, 255)
    assert pixel(*picture.cell_centre(2, 2)) == heatmap.MAX_COLOUR == (128, 0, 38)
    assert pixel(*picture.cell_centre(1, 0)) == heatmap.NAN_COLOUR
    small = pixel(*picture.cell_centre(1, 2))  # 0.25 of max 5: visible, lighter than the max
    assert small != heatmap.ZERO_COLOUR and sum(small) > sum(heatmap.MAX_COLOUR)


def test_diff_png_marks_padded_rows_as_a_hatched_grey_band(tmp_path):
    _, _, pixel = read_png((write(FindingKind.STALE_PADDING, tmp_path) / "diff.png").read_bytes())
    picture = heatmap.draw(HEATMAP, title="stale-padding")
    (x0, y0), (x1, y1) = picture.cell_centre(3, 0), picture.cell_centre(7, 3)  # the padded rows' cells
    band = [pixel(x, y) for x in range(x0, x1 + 1) for y in range(y0, y1 + 1)]
    assert all(r == g == b for r, g, b in band)  # grey only: no difference colour
    assert heatmap.PAD_BG in band  # the band's ground
    assert min(r for r, _, _ in band) <= heatmap.PAD_FG[0] + 10  # and its darker hatching
    assert band.count(heatmap.PAD_BG) > len(band) // 2


def test_diff_png_says_no_diff_available_without_heatmap(tmp_path):
    data = (write(FindingKind.CAPTURE_FAILURE, tmp_path) / "diff.png").read_bytes()
    width, height, pixel = read_png(data)
    assert width * height < heatmap.draw(HEATMAP).size[0] * heatmap.draw(HEATMAP).size[1] // 2  # a small note
    assert any(max(pixel(x, y)) < 60 for x in range(width) for y in range(height))  # it has dark text
    assert data == heatmap.render_unavailable_png("capture-failure: no replay output was compared")


# == repro.py ==================================================================================
@kinds
def test_repro_py_compiles(tmp_path, kind):
    path = write(kind, tmp_path)
    compile((path / "repro.py").read_text(), str(path / "repro.py"), "exec")


@kinds
def test_repro_py_imports_only_graphsafe_and_the_standard_library(tmp_path, kind):
    tree = ast.parse((write(kind, tmp_path) / "repro.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"graphsafe", "argparse", "importlib", "json", "os", "sys", "traceback"}


def test_repro_py_embeds_steps_spec_and_engine_as_json(tmp_path):
    recipe = recipe_of((write(FindingKind.STALE_PADDING, tmp_path) / "repro.py").read_text())
    assert [Batch.from_dict(b) for b in recipe["steps"]] == STEPS
    assert CaptureSpec(**{**recipe["spec"], "capture_sizes": tuple(recipe["spec"]["capture_sizes"])}) == SPEC
    assert recipe["target"] == "backend.attn:FlashBackend"
    assert recipe["kind"] == "stale-padding" and recipe["engine"] == "emulate"


def test_repro_captures_worst_case_at_the_checks_capture_sizes(tmp_path):
    recipe = recipe_of((write(FindingKind.LAZY_INIT, tmp_path) / "repro.py").read_text())
    assert recipe["capture_batch"] is None
    assert recipe["capture_sizes"] == [1, 2, 4]


def test_repro_uses_capture_sizes_the_checker_recorded(tmp_path):
    path = write(FindingKind.LAZY_INIT, tmp_path, details={"capture_sizes": [4]})
    assert recipe_of((path / "repro.py").read_text())["capture_sizes"] == [4]


def test_repro_rebuilds_a_drawn_capture_with_its_batch_and_size(tmp_path):
    recipe = recipe_of((write(FindingKind.FROZEN_HOST_VALUE, tmp_path) / "repro.py").read_text())
    assert Batch.from_dict(recipe["capture_batch"]) == DRAWN
    assert recipe["capture_size"] == 4


def test_repro_py_keeps_any_string_in_its_recipe_whole(tmp_path):
    where = 'self.x["a"] \'\'\' """ "" \\ ends with a backslash \\'
    path = write(FindingKind.STALE_PADDING, tmp_path, where=where, message='a """quoted""" message')
    assert recipe_of((path / "repro.py").read_text())["where"] == where


def test_repro_script_and_finding_json_agree_on_the_recipe(tmp_path):
    path = write(FindingKind.FROZEN_HOST_VALUE, tmp_path)
    assert recipe_of((path / "repro.py").read_text()) == repro.recipe_from_data(jsonio.read_data(path))


def test_repro_main_returns_2_for_a_missing_report(tmp_path, capsys):
    assert reports.repro_main(tmp_path / "nowhere") == 2
    assert f"{tmp_path / 'nowhere' / 'finding.json'} does not exist" in capsys.readouterr().err


def test_repro_main_returns_2_when_the_target_does_not_import(tmp_path):
    assert reports.repro_main(write(FindingKind.LAZY_INIT, tmp_path)) == 2  # backend.attn does not exist


# == atomicity =================================================================================
def _boom(*args, **kwargs):
    raise RuntimeError("disk full")


def test_a_failed_write_leaves_no_report_directory(tmp_path, monkeypatch):
    f = make_finding(FindingKind.STALE_PADDING)
    monkeypatch.setattr(heatmap, "render_png", _boom)  # after finding.json was written
    with pytest.raises(RuntimeError, match="disk full"):
        reports.write_report(f, tmp_path)
    parent = reports.report_path(f, tmp_path).parent
    assert list(parent.iterdir()) == []


def test_a_failed_rewrite_keeps_the_earlier_report_intact(tmp_path, monkeypatch):
    path = write(FindingKind.STALE_PADDING, tmp_path)
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    monkeypatch.setattr(markdown, "render", _boom)  # the last file written
    with pytest.raises(RuntimeError):
        write(FindingKind.STALE_PADDING, tmp_path, message="a newer message")
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert leftovers(path.parent) == []


KILLED_WRITER = """
import os, sys
sys.path.insert(0, {repo!r})
from graphsafe import FindingKind, reports
from graphsafe.reports import heatmap
from tests.unit.reports.test_reports import make_finding

def die(*a, **k):
    os._exit(9)  # killed mid-write: no clean-up runs

heatmap.render_png = die
reports.write_report(make_finding(FindingKind.STALE_PADDING), sys.argv[1])
"""


def test_a_killed_write_leaves_no_report_directory_and_the_next_write_cleans_up(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER.format(repo=str(REPO)), str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 9, proc.stderr
    f = make_finding(FindingKind.STALE_PADDING)
    final = reports.report_path(f, tmp_path)
    assert not final.exists()
    assert len(leftovers(final.parent)) == 1  # the dead writer's temporary directory
    reports.write_report(f, tmp_path)
    assert final.is_dir()
    assert leftovers(final.parent) == []


def test_an_old_report_moved_aside_by_a_dead_writer_is_restored(tmp_path):
    path = write(FindingKind.STALE_PADDING, tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    aside = path.parent / f"{atomic.OLD_PREFIX}{path.name}~{int(dead.stdout)}~abcd1234"
    os.rename(path, aside)  # killed between moving the old report aside and moving the new one in
    write(FindingKind.LAZY_INIT, tmp_path)  # any write in the same parent cleans up
    assert (path / "finding.json").is_file()
    assert leftovers(path.parent) == []


# == deduplication =============================================================================
def test_the_same_key_maps_to_the_same_directory_and_is_replaced(tmp_path):
    first = write(FindingKind.STALE_PADDING, tmp_path, message="first run")
    second = write(FindingKind.STALE_PADDING, tmp_path, message="second run", batches=STEPS[1:], step=0)
    assert first == second
    assert [p.name for p in first.parent.iterdir()] == [first.name]
    g = reports.load_finding(second)
    assert g.message == "second run" and g.batches == STEPS[1:]


def test_a_different_where_gets_a_different_directory(tmp_path):
    a = write(FindingKind.STALE_PADDING, tmp_path, where="self.seq_lens[2:4]")
    b = write(FindingKind.STALE_PADDING, tmp_path, where="self.block_table[2:4]")
    assert a != b
    assert reports.load_finding(a).where == "self.seq_lens[2:4]"
    assert reports.load_finding(b).where == "self.block_table[2:4]"


def test_different_targets_and_kinds_get_different_directories(tmp_path):
    paths = {
        write(FindingKind.STALE_PADDING, tmp_path),
        write(FindingKind.LAZY_INIT, tmp_path, where="self.seq_lens[2:4]"),
        write(FindingKind.STALE_PADDING, tmp_path, target="backend.attn:OtherBackend"),
    }
    assert len(paths) == 3


def test_a_hash_collision_takes_a_longer_hash(tmp_path):
    f = make_finding(FindingKind.STALE_PADDING)
    squatter = reports.report_path(f, tmp_path)
    squatter.mkdir(parents=True)
    (squatter / "finding.json").write_text(json.dumps({"key": ["other", "stale-padding", "x"]}))
    path = reports.write_report(f, tmp_path)
    assert path != squatter and path.name.startswith(squatter.name)
    assert json.loads((squatter / "finding.json").read_text())["key"][0] == "other"


# == end to end: the real checker on synthetic targets =========================================
# Persistent is safe (buffers allocated once in setup()); Fresh rebinds a buffer the graph reads
Persistent, Fresh = torch_targets.Safe, torch_targets.Fresh


class HostSync(Persistent):
    """capture-failure: forward() reads a device value on the host."""

    def forward(self):
        if self.lens.sum().item() > 1e9:
            self.out.zero_()
        return super().forward()


class Clamped(Persistent):
    """frozen-host-value: a host scalar from the capture batch clamps every replay."""

    def prepare(self, batch):
        super().prepare(batch)
        self.cap = float(max(batch.seq_lens))

    def forward(self):
        torch.mul(self.x, self.lens[:, None].clamp(max=self.cap), out=self.out)
        return self.out


def _check(target, root, **kw):
    return graphsafe.check(target, engine="emulate", examples=10, seed=0, database=False, report_dir=root, **kw)


@pytest.fixture(scope="module")
def fresh_check(tmp_path_factory):
    root = tmp_path_factory.mktemp("fresh")
    return _check(Fresh, root), root


@pytest.fixture(scope="module")
def fresh_report(fresh_check):
    result, _ = fresh_check
    assert result.kinds == {"stale-pointer"}, result.summary()
    return Path(result.findings[0].report_dir)


def _retarget(report: Path, dest: Path, target: str) -> Path:
    """A copy of ``report`` whose finding.json names ``target``."""
    copy = dest / "copy"
    shutil.copytree(report, copy)
    data = json.loads((copy / "finding.json").read_text())
    data["target"] = target
    (copy / "finding.json").write_text(json.dumps(data))
    return copy


def _run_script(script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_check_reports_stale_pointer_for_the_fresh_target(fresh_report):
    assert reports.load_finding(fresh_report).where == "self.lens"
    assert fresh_report.parent.name == "tests.targets.plain_torch_Fresh"  # named after the target


def test_repro_script_exits_1_while_the_bug_is_there(fresh_report, tmp_path):
    proc = _run_script(fresh_report / "repro.py", cwd=tmp_path)  # imports the target from the recorded root
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REPRODUCED: stale-pointer" in proc.stdout


def test_repro_script_for_the_fixed_twin_exits_0(fresh_report, tmp_path):
    fixed = reports.load_finding(fresh_report)
    fixed.target = "tests.unit.reports.test_reports:Persistent"
    path = reports.write_report(fixed, tmp_path)
    proc = _run_script(path / "repro.py", "--engine", "emulate", cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FIXED: no stale-pointer finding" in proc.stdout


def test_repro_main_exits_1_while_the_bug_is_there(fresh_report):
    assert reports.repro_main(fresh_report) == 1


def test_repro_main_exits_0_against_the_fixed_twin(fresh_report, tmp_path):
    assert reports.repro_main(_retarget(fresh_report, tmp_path, "tests.unit.reports.test_reports:Persistent")) == 0


def test_repro_main_engine_overrides_the_recorded_one(fresh_report, tmp_path):
    copy = _retarget(fresh_report, tmp_path, "tests.unit.reports.test_reports:Fresh")
    data = json.loads((copy / "finding.json").read_text())
    data["engine"] = "no-such-engine"
    (copy / "finding.json").write_text(json.dumps(data))
    assert reports.repro_main(copy) == 2
    assert reports.repro_main(copy, engine="emulate") == 1


def test_capture_failure_repro_exits_1_then_0_once_fixed(tmp_path):
    result = _check(HostSync, tmp_path)
    assert result.kinds == {"capture-failure"}, result.summary()
    report = Path(result.findings[0].report_dir)
    assert reports.repro_main(report) == 1
    assert reports.repro_main(_retarget(report, tmp_path, "tests.unit.reports.test_reports:Persistent")) == 0


@pytest.mark.parametrize("capture", ["drawn", "minimal"])
def test_a_capture_other_than_the_worst_case_repro_exits_1_then_0_once_fixed(tmp_path, capture):
    result = _check(Clamped, tmp_path, capture=capture)
    assert result.kinds == {"frozen-host-value"}, result.summary()
    report = Path(result.findings[0].report_dir)
    assert jsonio.read_data(report)["capture_is_worst_case"] is False
    recipe = recipe_of((report / "repro.py").read_text())
    if capture == "drawn":  # the drawn batch travels in the recipe
        assert recipe["capture_batch"] is not None
    else:  # a named policy is rebuilt by name
        assert recipe["capture_batch"] is None and recipe["capture"] == "minimal"
    assert reports.repro_main(report) == 1
    assert reports.repro_main(_retarget(report, tmp_path, "tests.unit.reports.test_reports:Persistent")) == 0

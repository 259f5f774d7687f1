"""Specifications for what ``report.md`` explains (beside test_reports.py's content checks).

* a KV-cache mismatch table with ``request -1`` says what -1 means;
* the capture section lists the capture sizes once: the sizes actually captured;
* a target-error found in a step marks that step as failing, in the finding's summary, report.md
  and repro.py, like every other finding; one raised before any step says that no step is marked.
"""

from __future__ import annotations

import re
from pathlib import Path

import graphsafe
from graphsafe import FindingKind, Mismatch
from graphsafe.reports import markdown
from tests.targets import plain_torch
from tests.unit.reports.test_reports import OUTPUT_MISMATCH, STATIC_MISMATCH, STEPS, write

UNOWNED = Mismatch(
    tensor="static['kv_cache']",
    count=352,
    total=8704,
    max_abs=0.75,
    max_rel=3.0,
    first=[
        {
            "index": [4, 14, 0],
            "graph": -0.45,
            "eager": -0.38,
            "block": 4,
            "request": -1,
            "token_block": -1,
            "first_token": -1,
        }
    ],
)


# == -1 in the KV-cache table ==================================================================
def test_request_minus_one_is_explained_under_the_table(tmp_path):
    md = (write(FindingKind.STALE_PADDING, tmp_path, mismatches=[UNOWNED]) / "report.md").read_text()
    assert "| -1 | 4 | -1 | -1 | (4, 14, 0) | -0.45 | -0.38 |" in md
    table_end = md.index("| -1 | 4 | -1 | -1 |")
    note = md.index(markdown.UNOWNED_NOTE)
    assert note > table_end and "no live request of this step owns the block" in markdown.UNOWNED_NOTE
    assert "stale state" in markdown.UNOWNED_NOTE and "padded slot" in markdown.UNOWNED_NOTE


def test_no_explanation_when_every_block_has_an_owner(tmp_path):
    md = (
        write(FindingKind.REPLAY_MISMATCH, tmp_path, mismatches=[OUTPUT_MISMATCH, STATIC_MISMATCH]) / "report.md"
    ).read_text()
    assert markdown.UNOWNED_NOTE not in md


# == capture sizes, once =======================================================================
def _capture_section(md: str) -> str:
    return md[md.index("## Capture") : md.index("## Steps")]


def test_capture_sizes_appear_once_as_the_sizes_captured(tmp_path):
    section = _capture_section((write(FindingKind.LAZY_INIT, tmp_path) / "report.md").read_text())
    assert "| capture_sizes |" not in section  # not the spec's "()" (= default) beside the real list
    assert "| () |" not in section
    assert re.findall(r"capture sizes captured: ([\d, ]+)", section) == ["1, 2, 4 "]
    assert section.count("capture sizes") == 1


def test_capture_sizes_the_checker_recorded_win(tmp_path):
    md = (write(FindingKind.LAZY_INIT, tmp_path, details={"capture_sizes": [4]}) / "report.md").read_text()
    assert "- capture sizes captured: 4 (from finding.details)" in _capture_section(md)


# == the failing step of a target-error ========================================================
class RaisesOnShortSequences(plain_torch.Safe):
    """target-error: prepare() raises for a sequence shorter than 3 (the capture's worst case is not)."""

    def prepare(self, batch):
        if min(batch.seq_lens) < 3:
            raise IndexError(f"seq_len {min(batch.seq_lens)} is below the 3 this backend handles")
        super().prepare(batch)


def test_a_target_error_marks_its_failing_step(tmp_path):
    result = graphsafe.check(
        RaisesOnShortSequences, engine="emulate", examples=20, seed=0, database=False, report_dir=tmp_path
    )
    (f,) = result.findings
    assert f.kind == FindingKind.TARGET_ERROR, result.summary()
    assert f.batches and f.step == len(f.batches) - 1
    assert min(f.batches[f.step].seq_lens) < 3
    lines = f.summary().splitlines()
    assert f"  step {f.step}: {f.batches[f.step].short()}  <- fails" in lines
    assert sum("<- fails" in line for line in lines) == 1
    report = Path(f.report_dir)
    assert f"| {f.step} | {f.batches[f.step].short()} |" in (report / "report.md").read_text()
    assert "**fails here**" in (report / "report.md").read_text()
    assert f"step {f.step}: {f.batches[f.step].short()}   <- fails" in (report / "repro.py").read_text()


def test_a_target_error_before_any_step_says_no_step_is_marked(tmp_path):
    md = (write(FindingKind.TARGET_ERROR, tmp_path, batches=list(STEPS), step=-1) / "report.md").read_text()
    assert "**fails here**" not in md
    assert "No step is marked: the finding arose before the first step ran" in md


# == paths as the user types them ==============================================================
def test_a_report_under_the_current_directory_names_itself_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(FindingKind.LAZY_INIT, tmp_path / "reports")  # an absolute root, as the front ends pass it
    rel = f"reports/backend.attn_FlashBackend/{path.name}"
    md, script = (path / "report.md").read_text(), (path / "repro.py").read_text()
    assert f"python {rel}/repro.py" in md and f"graphsafe repro {rel}" in md
    assert f"python {rel}/repro.py" in script
    assert str(tmp_path) not in md + script

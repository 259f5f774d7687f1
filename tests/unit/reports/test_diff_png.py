"""Specifications for ``diff.png`` (drawn with matplotlib) and the heatmap data behind it.

* the picture: labelled rows (rXtY) and column groups, a colour bar, padded rows shaded and
  labelled, NaN/inf in their own colour, a title with the kind and the largest difference;
* the bytes: a PNG without software name or version, the same for the same data in any process;
* static state: when the outputs agree and only a static tensor differs (a KV cache written through
  a padded slot), the data and the picture show that tensor's difference per KV block, not a blank.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from PIL import Image  # matplotlib's own image library: decodes what diff.png holds

import graphsafe
from graphsafe import Batch, CaptureSpec, FindingKind, Mismatch
from graphsafe.diagnosis.loop import heatmap as heatmap_data
from graphsafe.reports import heatmap, jsonio
from tests.subprocesses import REPO
from tests.unit.reports.test_reports import HEATMAP, make_finding, write

INF = float("inf")


def _texts(labels) -> list[str]:
    return [t.get_text() for t in labels]


def _rgb(png: bytes):
    return Image.open(io.BytesIO(png)).convert("RGB")


# == the picture ===============================================================================
def test_rows_are_labelled_by_request_and_token_and_padded_rows_as_pad():
    ax = heatmap.draw(HEATMAP, title="stale-padding").axes
    assert _texts(ax.get_yticklabels()) == ["r0t0", "r0t1", "r1t0"] + ["pad"] * 5
    assert "request" in ax.get_ylabel() and "token" in ax.get_ylabel()


def test_columns_are_output_column_groups():
    ax = heatmap.draw(HEATMAP).axes
    assert _texts(ax.get_xticklabels()) == ["0", "2", "4", "6"]  # first output column of each group of 2
    assert "output columns" in ax.get_xlabel() and "max over 2 values" in ax.get_xlabel()


def test_title_names_the_kind_the_tensor_and_the_largest_difference():
    title = heatmap.draw(HEATMAP, title="lazy-init").axes.get_title()
    assert title.startswith("lazy-init: |graph - eager|")
    assert "output[0]" in title
    assert "max NaN/inf (largest finite 5)" in title
    assert heatmap.draw({**HEATMAP, "values": [[1.0, 2.5]]}).axes.get_title().endswith("\nmax 2.5")


def test_a_colour_bar_runs_from_zero_to_the_largest_finite_difference():
    picture = heatmap.draw(HEATMAP)
    bars = [a for a in picture.figure.axes if a is not picture.axes]
    assert len(bars) == 1 and bars[0].get_ylabel() == "|graph - eager|"
    assert bars[0].get_ylim() == (0.0, 5.0)


def test_the_legend_names_the_nan_colour_and_the_padded_band():
    (legend,) = heatmap.draw(HEATMAP).figure.legends
    labels = _texts(legend.get_texts())
    assert "NaN or inf difference" in labels and "padded row (not compared)" in labels
    no_padding = heatmap.draw({**HEATMAP, "padded_rows": 0}).figure.legends[0]
    assert "padded row (not compared)" not in _texts(no_padding.get_texts())


def test_many_rows_get_a_readable_subset_of_labels():
    values = [[float(i)] for i in range(120)]
    ax = heatmap.draw({"values": values, "rows": [f"r{i}t0" for i in range(120)], "padded_rows": 0, "col_step": 1}).axes
    labels = _texts(ax.get_yticklabels())
    assert 20 <= len(labels) <= heatmap.MAX_TICKS and labels[:2] == ["r0t0", "r3t0"]


def test_all_zero_values_draw_white_cells():
    picture = heatmap.draw({"values": [[0.0, 0.0]], "rows": ["r0t0"], "padded_rows": 0, "col_step": 1})
    assert _rgb(picture.png).getpixel(picture.cell_centre(0, 1)) == heatmap.ZERO_COLOUR


def test_render_png_refuses_data_without_values():
    assert not heatmap.usable({"values": []}) and not heatmap.usable(None)
    with pytest.raises(ValueError, match="render_unavailable_png"):
        heatmap.render_png({"values": []})


# == the bytes =================================================================================
def test_the_png_carries_no_software_name_or_version():
    png = heatmap.render_png(HEATMAP, title="stale-padding")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"Software" not in png and b"atplotlib" not in png
    assert b"tEXt" not in png and b"tIME" not in png


SAME_BYTES = """
import hashlib, sys
sys.path.insert(0, {repo!r})
from graphsafe.reports import heatmap
from tests.unit.reports.test_reports import HEATMAP
print(hashlib.sha256(heatmap.render_png(HEATMAP, title="stale-padding")).hexdigest())
"""


def test_the_same_data_gives_the_same_bytes_in_another_process():
    import hashlib

    here = hashlib.sha256(heatmap.render_png(HEATMAP, title="stale-padding")).hexdigest()
    proc = subprocess.run(
        [sys.executable, "-c", SAME_BYTES.format(repo=str(REPO))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONHASHSEED": "123"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == here
    assert heatmap.render_png({**HEATMAP, "padded_rows": 4}) != heatmap.render_png(HEATMAP)  # the data counts


# == static state ==============================================================================
SPEC = CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, block_size=4)  # num_blocks 5


def _ctx(graph_cache: torch.Tensor, eager_cache: torch.Tensor, out_diff: float = 0.0) -> SimpleNamespace:
    """Just what diagnose.heatmap reads: a step of 2 requests owning blocks 1 and 2 (block 4 unowned)."""
    batch = Batch(query_lens=(1, 1), seq_lens=(3, 4), block_table=((1,), (2,)), seed=5)
    out = torch.ones(2, 8)
    mism = [
        Mismatch(
            "static['kv_cache']",
            2,
            graph_cache.numel(),
            1.5,
            1.0,
            [{"index": [4, 0, 0], "block": 4, "request": -1, "token_block": -1}],
        )
    ]
    if out_diff:
        mism.insert(0, Mismatch("output[0]", 1, 16, out_diff, 1.0, []))
    return SimpleNamespace(
        mismatches=mism,
        graph_static={"kv_cache": graph_cache},
        eager_static={"kv_cache": eager_cache},
        spec=SPEC,
        batch=batch,
        graph=SimpleNamespace(outputs=[torch.ones(4, 8)]),
        graph_live=[out + out_diff],
        eager_live=[out],
    )


def _caches() -> tuple[torch.Tensor, torch.Tensor]:
    eager = torch.zeros(SPEC.num_blocks, 4, 2)
    graph = eager.clone()
    graph[4, 1, 0] = 1.5  # written through a padded slot into a block nobody owns
    graph[2, 0, 1] = float("nan")
    return graph, eager


def test_static_only_difference_gives_per_block_data():
    data = heatmap_data(_ctx(*_caches()))
    assert data["source"] == "static['kv_cache']" and data["row_kind"] == "block"
    assert data["rows"] == ["b0 none", "b1 r0/tb0", "b2 r1/tb0", "b3 none", "b4 none"]
    assert data["unowned_rows"] == [0, 3, 4]
    assert max(data["values"][4]) == 1.5 and INF in data["values"][2]
    assert all(v == 0 for r in (0, 1, 3) for v in data["values"][r])


def test_differing_outputs_keep_the_output_heatmap():
    data = heatmap_data(_ctx(*_caches(), out_diff=0.5))
    assert data["source"] == "output[0]" and data["row_kind"] == "token"
    assert data["rows"] == ["r0t0", "r1t0"] and data["padded_rows"] == 2
    assert data["values"] == [[0.5] * 8, [0.5] * 8]


def test_a_large_static_tensor_keeps_only_the_rows_that_differ():
    graph, eager = torch.zeros(300, 3), torch.zeros(300, 3)
    graph[7, 1] = graph[250, 0] = 2.0
    ctx = _ctx(graph, eager)
    ctx.mismatches[0].tensor = "static['kv_cache']"
    data = heatmap_data(ctx, max_rows=128)
    assert data["row_kind"] == "row" and data["rows"] == ["row7", "row250"]


def test_static_only_difference_draws_the_static_tensor_not_a_blank():
    data = jsonio.loads(jsonio.dumps({"h": heatmap_data(_ctx(*_caches()))}))["h"]  # as finding.json holds it
    picture = heatmap.draw(data, title="stale-padding")
    title = picture.axes.get_title()
    assert (
        "of static['kv_cache'] per KV block" in title
        and "largest finite 1.5" in title
        and "static state differs" in title
    )
    image = _rgb(picture.png)
    assert (
        image.getpixel(picture.cell_centre(4, 2)) == heatmap.MAX_COLOUR
    )  # the stale write (block 4, column 2), dark red
    assert image.getpixel(picture.cell_centre(2, 1)) == heatmap.NAN_COLOUR
    assert image.getpixel(picture.cell_centre(1, 0)) == heatmap.ZERO_COLOUR
    assert _texts(picture.axes.get_yticklabels())[4] == "b4 none"
    legend = _texts(picture.figure.legends[0].get_texts())
    assert any("no live request owns the block" in t for t in legend)


def test_report_md_describes_a_static_heatmap(tmp_path):
    f = make_finding(FindingKind.STALE_PADDING, heatmap=heatmap_data(_ctx(*_caches())))
    md = (write(FindingKind.STALE_PADDING, tmp_path, heatmap=f.heatmap) / "report.md").read_text()
    assert "![|graph - eager| of static['kv_cache']](diff.png)" in md
    assert "The outputs agree; the static tensor `static['kv_cache']` differs. 5 KV blocks" in md
    assert "bB none = no live request of this step owns block B" in md


class PaddedCacheWrite(graphsafe.Target):
    """stale-padding with equal outputs: padded token slots write their (poisoned) key into the KV
    cache through slot indices left over from the capture batch; the output reads no cache."""

    support = graphsafe.Support.ALWAYS
    default_spec = SPEC

    def setup(self, spec, device):
        t = spec.max_reqs * spec.max_query_len
        self.spec = spec
        self.k = torch.zeros(t, 2, device=device)
        self.slots = torch.zeros(t, dtype=torch.long, device=device)
        self.cache = torch.zeros(spec.num_blocks, spec.block_size, 2, device=device)
        self.out = torch.zeros(t, 2, device=device)

    def static(self):
        return {"kv_cache": self.cache}

    def prepare(self, batch):
        n, bs = batch.num_tokens, self.spec.block_size
        self.k[:n] = graphsafe.seeded((n, 2), seed=batch.seed)
        slots = [table[(s - 1) // bs] * bs + (s - 1) % bs for table, s in zip(batch.block_table, batch.seq_lens)]
        self.slots[:n] = torch.tensor(slots)  # slots[n:] keep the last batch's values: the bug

    def forward(self):
        self.cache.view(-1, 2).index_copy_(0, self.slots, self.k)
        torch.mul(self.k, 2.0, out=self.out)
        return self.out


def test_a_real_static_only_finding_draws_the_kv_cache(tmp_path):
    result = graphsafe.check(
        PaddedCacheWrite, engine="emulate", examples=30, seed=0, database=False, report_dir=tmp_path
    )
    (f,) = result.findings
    assert f.kind == FindingKind.STALE_PADDING, result.summary()
    assert [m.tensor for m in f.mismatches] == ["static['kv_cache']"]
    assert f.heatmap["source"] == "static['kv_cache']"
    assert heatmap.finite_max(f.heatmap["values"]) > 0 or heatmap.describe(f.heatmap)["nonfinite"]
    assert "per KV block" in heatmap.draw(f.heatmap).axes.get_title()
    assert (Path(f.report_dir) / "diff.png").read_bytes() == heatmap.render_png(
        jsonio.read_data(f.report_dir)["heatmap"], title="stale-padding"
    )

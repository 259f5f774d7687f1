"""``diff.png``: a heatmap of |graph - eager| over the live output rows.

Input is ``Finding.heatmap``::

    {"values": [[float, ...], ...],   # one row per live token, one column per pooled group
     "rows": ["r0t0", "r0t1", ...],   # row labels: request / token
     "padded_rows": 2,                # padded token rows below the live ones (no values)
     "col_step": 4}                   # each column is the max over this many output values

Picture, top to bottom: a title with the maximum difference; the grid (row
labels on the left, one ``CELL`` x ``CELL`` square per value); the padded rows
as a hatched grey band labelled ``PAD``; a legend (colour bar from 0 to the
maximum, the NaN/inf colour, the padded-row swatch).

Colour map (white-yellow-orange-red, "YlOrRd"): exactly 0 is white; any
non-zero difference is at least pale yellow, growing linearly with
``value / max`` to dark red at the maximum finite difference; a NaN or
infinite difference (stored as ``inf``) is magenta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .png import GLYPH_H, Canvas, text_width

__all__ = ["render_png", "render_unavailable_png", "layout", "Layout", "colour", "CELL",
           "NAN_COLOUR", "PAD_BG", "PAD_FG", "ZERO_COLOUR", "usable"]

CELL = 8  # pixels per heatmap cell (both directions) for heatmaps up to MAX_FULL_CELLS a side
MAX_FULL_CELLS = 256
MARGIN = 8
WHITE = (255, 255, 255)
INK = (30, 30, 30)
GRID_LINE = (60, 60, 60)
ZERO_COLOUR = WHITE
NAN_COLOUR = (220, 0, 220)
PAD_BG = (200, 200, 200)
PAD_FG = (120, 120, 120)
# YlOrRd stops at t = 0, 1/3, 2/3, 1
_STOPS = [(255, 237, 160), (254, 178, 76), (240, 59, 32), (128, 0, 38)]
TITLE = "|GRAPH - EAGER|"
TITLE_SCALE = 2
LEGEND_BAR_W = 128


def colour(value: float, vmax: float) -> tuple[int, int, int]:
    """The colour of one cell: white for 0, magenta for NaN/inf, YlOrRd by ``value / vmax`` otherwise."""
    if value is None or math.isnan(value) or math.isinf(value):
        return NAN_COLOUR
    if value == 0 or vmax <= 0:
        return ZERO_COLOUR
    t = min(1.0, abs(value) / vmax)  # t = 0+ is already pale yellow, not white
    seg = min(len(_STOPS) - 2, int(t * (len(_STOPS) - 1)))
    local = t * (len(_STOPS) - 1) - seg
    a, b = _STOPS[seg], _STOPS[seg + 1]
    return tuple(int(round(a[i] + (b[i] - a[i]) * local)) for i in range(3))  # type: ignore[return-value]


def usable(heatmap: Any) -> bool:
    """True when ``heatmap`` has at least one row of values to draw."""
    return (
        isinstance(heatmap, dict)
        and isinstance(heatmap.get("values"), list)
        and len(heatmap["values"]) > 0
        and all(isinstance(r, list) for r in heatmap["values"])
        and max(len(r) for r in heatmap["values"]) > 0
    )


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INF"
    return f"{v:.3g}".upper()


@dataclass(frozen=True)
class Layout:
    """Where everything goes; ``cell_xy(r, c)`` is the top-left pixel of a cell."""

    width: int
    height: int
    cell: int
    grid_x: int
    grid_y: int
    live_rows: int
    padded_rows: int
    cols: int
    legend_y: int
    labels: bool

    def cell_xy(self, row: int, col: int) -> tuple[int, int]:
        """Top-left pixel of cell (row, col); rows past ``live_rows`` are the padded band."""
        return self.grid_x + col * self.cell, self.grid_y + row * self.cell


def _finite_max(values: list[list[float]]) -> float:
    m = 0.0
    for row in values:
        for v in row:
            if v is not None and not math.isnan(v) and not math.isinf(v):
                m = max(m, abs(v))
    return m


def _subtitle(heatmap: dict, title: str = "") -> str:
    values = heatmap["values"]
    cols = max(len(r) for r in values)
    padded = max(0, int(heatmap.get("padded_rows") or 0))
    step = int(heatmap.get("col_step") or 1)
    sub = f"MAX {_fmt(_finite_max(values))}  ROWS {len(values)} LIVE + {padded} PAD  COLS {cols} X MAX OF {step}"
    return f"{title}  {sub}" if title else sub


def layout(heatmap: dict, title: str = "") -> Layout:
    """The image geometry for ``heatmap`` (``usable(heatmap)`` must hold)."""
    values = heatmap["values"]
    live = len(values)
    cols = max(len(r) for r in values)
    padded = max(0, int(heatmap.get("padded_rows") or 0))
    biggest = max(live + padded, cols)
    cell = CELL if biggest <= MAX_FULL_CELLS else max(1, (MAX_FULL_CELLS * CELL) // biggest)
    labels_on = cell >= GLYPH_H + 2
    rows = [str(r) for r in heatmap.get("rows") or []]
    label_w = (max([text_width(r) for r in rows[:live]] + [text_width("PAD")]) + 4) if labels_on else 0
    title_h = GLYPH_H * TITLE_SCALE + 4 + GLYPH_H + 6
    grid_x, grid_y = MARGIN + label_w, MARGIN + title_h
    grid_h = (live + padded) * cell
    legend_y = grid_y + grid_h + 2 + 8
    legend_h = 3 * (GLYPH_H + 6) + 8
    legend_w = LEGEND_BAR_W + text_width(" 0.000E+00") + text_width("NAN/INF DIFFERENCE") + 40
    width = max(grid_x + cols * cell + MARGIN, MARGIN + legend_w, MARGIN + text_width(TITLE, TITLE_SCALE) + MARGIN,
                MARGIN + text_width(_subtitle(heatmap, title)) + MARGIN)
    height = legend_y + legend_h + MARGIN
    return Layout(width, height, cell, grid_x, grid_y, live, padded, cols, legend_y, labels_on)


def render_png(heatmap: dict, *, title: str = "") -> bytes:
    """PNG bytes of the heatmap (see the module docstring for the picture and colour map)."""
    if not usable(heatmap):
        raise ValueError("heatmap has no values to draw; use render_unavailable_png()")
    lay = layout(heatmap, title)
    values = heatmap["values"]
    vmax = _finite_max(values)
    c = Canvas(lay.width, lay.height, WHITE)
    # title and subtitle
    c.text(MARGIN, MARGIN, TITLE, INK, TITLE_SCALE)
    c.text(MARGIN, MARGIN + GLYPH_H * TITLE_SCALE + 4, _subtitle(heatmap, title), INK)
    # live cells
    for r, row in enumerate(values):
        for col in range(lay.cols):
            v = row[col] if col < len(row) else 0.0
            x, y = lay.cell_xy(r, col)
            c.fill_rect(x, y, lay.cell, lay.cell, colour(v, vmax))
    # padded band
    if lay.padded_rows:
        x, y = lay.cell_xy(lay.live_rows, 0)
        c.hatch_rect(x, y, lay.cols * lay.cell, lay.padded_rows * lay.cell, PAD_BG, PAD_FG)
        c.fill_rect(x, y - 1, lay.cols * lay.cell, 1, INK)  # live / padded boundary
    # row labels
    if lay.labels:
        rows = [str(r) for r in heatmap.get("rows") or []]
        dy = (lay.cell - GLYPH_H) // 2
        for r in range(lay.live_rows):
            label = rows[r] if r < len(rows) else str(r)
            c.text(MARGIN, lay.grid_y + r * lay.cell + dy, label, INK)
        for r in range(lay.padded_rows):
            c.text(MARGIN, lay.grid_y + (lay.live_rows + r) * lay.cell + dy, "PAD", PAD_FG)
    # frame
    c.outline(lay.grid_x - 1, lay.grid_y - 1, lay.cols * lay.cell + 2,
              (lay.live_rows + lay.padded_rows) * lay.cell + 2, GRID_LINE)
    _legend(c, lay, vmax)
    return c.to_png()


def _legend(c: Canvas, lay: Layout, vmax: float) -> None:
    x, y = MARGIN, lay.legend_y
    line = GLYPH_H + 6
    # colour bar 0 .. vmax
    x = c.text(x, y + 1, "0 ", INK)
    for i in range(LEGEND_BAR_W):
        t = (i + 1) / LEGEND_BAR_W
        c.fill_rect(x + i, y, 1, GLYPH_H + 2, colour(t * vmax if vmax > 0 else 0.0, vmax))
    c.outline(x - 1, y - 1, LEGEND_BAR_W + 2, GLYPH_H + 4, GRID_LINE)
    c.text(x + LEGEND_BAR_W + 4, y + 1, _fmt(vmax), INK)
    # NaN / inf swatch
    y += line
    c.fill_rect(MARGIN, y, 8, GLYPH_H + 2, NAN_COLOUR)
    c.text(MARGIN + 12, y + 1, "NAN/INF DIFFERENCE", INK)
    # padded swatch
    y += line
    c.hatch_rect(MARGIN, y, 8, GLYPH_H + 2, PAD_BG, PAD_FG)
    c.text(MARGIN + 12, y + 1, "PADDED ROW (NOT COMPARED)", INK)


def render_unavailable_png(reason: str = "") -> bytes:
    """A small PNG saying that no output diff is available (e.g. the capture failed)."""
    lines = ["NO OUTPUT DIFF AVAILABLE"] + ([reason.upper()[:60]] if reason else [])
    w = max(text_width(s, 2 if i == 0 else 1) for i, s in enumerate(lines)) + 2 * MARGIN
    h = 2 * MARGIN + GLYPH_H * 2 + (len(lines) - 1) * (GLYPH_H + 6) + 4
    c = Canvas(w, h, WHITE)
    c.hatch_rect(0, 0, w, h, (245, 245, 245), (225, 225, 225), period=6)
    c.text(MARGIN, MARGIN, lines[0], INK, 2)
    for i, s in enumerate(lines[1:]):
        c.text(MARGIN, MARGIN + GLYPH_H * 2 + 6 + i * (GLYPH_H + 6), s, INK)
    c.outline(0, 0, w, h, GRID_LINE)
    return c.to_png()

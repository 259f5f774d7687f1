"""``diff.png``: a heatmap of |graph - eager| per row, drawn with matplotlib (Agg, never a GUI).

Input is ``Finding.heatmap`` (made by :func:`graphsafe.diagnosis.loop.heatmap`)::

    {"values": [[float, ...], ...],   # one row per drawn row, one column per pooled group
     "rows": ["r0t0", "r0t1", ...],   # row labels
     "padded_rows": 2,                # padded token rows below the live ones (no values)
     "col_step": 4,                   # each column is the max over this many values of the row
     "source": "output[0]",           # the tensor drawn (absent in older reports: the first output)
     "row_kind": "token",             # "token" (output rows), "block" (KV blocks) or "row" (first dim)
     "unowned_rows": [3]}             # block rows no live request of the step owns (static tensors)

When the outputs agree and only static state differs (a KV cache written through a padded slot),
the data is that static tensor's difference per KV block (labels ``b4 r0/tb1``: block 4 holds token
block 1 of request 0; ``b4 none``: no live request of the step owns block 4) or per first-dim row.

Picture: a title with the kind, the tensor and the largest difference; the grid with row labels on
the left and output column groups below; padded rows as a hatched grey band labelled ``pad``; a
colour bar from 0 to the largest finite difference; a legend for the NaN/inf colour, the zero colour
and the padded band.  Colour map: exactly 0 is white; any non-zero difference is YlOrRd by
``value / max`` (pale yellow to dark red); a NaN or infinite difference (stored as ``inf``) is magenta.

The PNG carries no software name or version: the same data gives the same bytes.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

__all__ = [
    "render_png",
    "render_unavailable_png",
    "draw",
    "Picture",
    "usable",
    "finite_max",
    "describe",
    "ZERO_COLOUR",
    "NAN_COLOUR",
    "PAD_BG",
    "PAD_FG",
    "MAX_COLOUR",
    "DPI",
]

DPI = 100
ZERO_COLOUR = (255, 255, 255)
NAN_COLOUR = (220, 0, 220)
MAX_COLOUR = (128, 0, 38)  # YlOrRd at 1
PAD_BG = (200, 200, 200)
PAD_FG = (120, 120, 120)
UNOWNED_LABEL = (110, 110, 110)
CMAP = "YlOrRd"
MAX_TICKS = 48  # row labels drawn at most; every k-th row beyond that
MAX_COL_TICKS = 16


def _rgb(c: tuple[int, int, int]) -> tuple[float, float, float]:
    return tuple(v / 255 for v in c)  # type: ignore[return-value]


def usable(heatmap: Any) -> TypeGuard[dict[str, Any]]:
    """True when ``heatmap`` has at least one row of values to draw."""
    return (
        isinstance(heatmap, dict)
        and isinstance(heatmap.get("values"), list)
        and len(heatmap["values"]) > 0
        and all(isinstance(r, list) for r in heatmap["values"])
        and max(len(r) for r in heatmap["values"]) > 0
    )


def _bad(v: Any) -> bool:
    return v is None or math.isnan(v) or math.isinf(v)


def finite_max(values: list[list[float]]) -> float:
    """The largest finite |difference| (0 when there is none)."""
    return max((abs(v) for row in values for v in row if not _bad(v)), default=0.0)


def _fmt(v: float) -> str:
    return "nan" if math.isnan(v) else "inf" if math.isinf(v) else f"{v:.3g}"


def describe(heatmap: dict) -> dict[str, Any]:
    """What the picture shows, in words: ``source``, ``row_kind``, ``max`` (text), ``nonfinite`` (bool)."""
    values = heatmap["values"]
    return {
        "source": str(heatmap.get("source") or "output[0]"),
        "row_kind": str(heatmap.get("row_kind") or "token"),
        "max": _fmt(finite_max(values)),
        "nonfinite": any(_bad(v) for row in values for v in row),
    }


@dataclass
class Picture:
    """A drawn heatmap: the matplotlib figure and axes, and the PNG bytes they were saved as."""

    figure: Any
    axes: Any
    png: bytes

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the PNG in pixels."""
        w, h = self.figure.get_size_inches()
        return int(round(w * DPI)), int(round(h * DPI))

    def cell_centre(self, row: int, col: int) -> tuple[int, int]:
        """The PNG pixel (x, y from the top) at the centre of cell (row, col); padded rows follow the live ones."""
        x, y = self.axes.transData.transform((col, row))
        return int(x), int(self.size[1] - y)


def _grid(values: list[list[float]]):
    cols = max(len(r) for r in values)
    a = np.array([[float(v) if v is not None else math.nan for v in r] + [0.0] * (cols - len(r)) for r in values])
    bad = ~np.isfinite(a)
    a = np.where(a == 0, -1.0, np.abs(a))  # exactly 0 falls below the colour scale: drawn white
    return np.ma.masked_array(np.where(bad, 0.0, a), mask=bad)  # NaN/inf: the "bad" colour


def _labels(heatmap: dict, live: int) -> list[str]:
    rows = [str(r) for r in heatmap.get("rows") or []]
    return [rows[i] if i < len(rows) else str(i) for i in range(live)]


def draw(heatmap: dict, *, title: str = "") -> Picture:
    """The heatmap drawn and saved (see the module docstring); :func:`render_png` returns its bytes."""
    if not usable(heatmap):
        raise ValueError("heatmap has no values to draw; use render_unavailable_png()")
    # matplotlib costs about half a second to import: only when a report is written
    from matplotlib import colormaps, colors  # noqa: PLC0415
    from matplotlib.patches import Patch, Rectangle  # noqa: PLC0415

    values = heatmap["values"]
    about = describe(heatmap)
    live, cols = len(values), max(len(r) for r in values)
    padded = max(0, int(heatmap.get("padded_rows") or 0))
    step = int(heatmap.get("col_step") or 1)
    rows = live + padded
    vmax = finite_max(values)
    legend = [
        Patch(facecolor=_rgb(ZERO_COLOUR), edgecolor="0.5", label="0 (no difference)"),
        Patch(facecolor=_rgb(NAN_COLOUR), label="NaN or inf difference"),
    ]
    if padded:
        legend.append(
            Patch(facecolor=_rgb(PAD_BG), edgecolor=_rgb(PAD_FG), hatch="///", label="padded row (not compared)")
        )
    if heatmap.get("unowned_rows"):
        legend.append(
            Patch(
                facecolor="none",
                edgecolor="none",
                label="none: no live request owns the block (stale state or padding)",
            )
        )
    per_row = 2 if len(legend) > 3 or padded == 0 else 3
    fig, ax, cax = _layout(
        cols, rows, max(len(t) for t in _labels(heatmap, live) + ["pad"]), math.ceil(len(legend) / per_row)
    )
    cmap = colormaps[CMAP].with_extremes(under=_rgb(ZERO_COLOUR), bad=_rgb(NAN_COLOUR))
    norm = colors.Normalize(vmin=0.0, vmax=vmax if vmax > 0 else 1.0)
    image = ax.imshow(
        _grid(values),
        cmap=cmap,
        norm=norm,
        interpolation="nearest",
        aspect="auto",
        extent=(-0.5, cols - 0.5, live - 0.5, -0.5),
    )
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    if padded:
        ax.add_patch(
            Rectangle(
                (-0.5, live - 0.5),
                cols,
                padded,
                facecolor=_rgb(PAD_BG),
                edgecolor=_rgb(PAD_FG),
                hatch="///",
                linewidth=0,
            )
        )
        ax.axhline(live - 0.5, color="black", linewidth=1.0)
    _ticks(ax, heatmap, live, padded, cols, step, about["row_kind"])
    bar = fig.colorbar(image, cax=cax)
    bar.set_label("|graph - eager|")
    what = {
        "token": f"over the live rows of {about['source']}",
        "block": f"of {about['source']} per KV block",
        "row": f"of {about['source']} per row",
    }[about["row_kind"]]
    head = f"{title}: " if title else ""
    note = "  (outputs agree; static state differs)" if about["row_kind"] != "token" else ""
    largest = f"max NaN/inf (largest finite {about['max']})" if about["nonfinite"] else f"max {about['max']}"
    ax.set_title(f"{head}|graph - eager| {what}\n{largest}{note}", fontsize=10)
    fig.legend(handles=legend, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=per_row, fontsize=8, frameon=False)
    return Picture(fig, ax, _png(fig))


def _layout(cols: int, rows: int, label_chars: int, legend_rows: int):
    """Figure, heatmap axes and colour-bar axes, placed in inches (a layout engine costs more than the drawing)."""
    width = min(16.0, max(6.5, 3.2 + 0.14 * cols))
    height = min(16.0, max(3.6, 2.2 + 0.16 * rows))
    left, right, top, bottom = 0.55 + 0.06 * label_chars, 1.05, 0.6, 0.6 + 0.22 * legend_rows
    fig = _figure(width, height)
    w, h = width - left - right, height - top - bottom
    ax = fig.add_axes((left / width, bottom / height, w / width, h / height))
    cax = fig.add_axes(((width - right + 0.15) / width, bottom / height, 0.18 / width, h / height))
    return fig, ax, cax


def _ticks(ax: Any, heatmap: dict, live: int, padded: int, cols: int, step: int, row_kind: str) -> None:
    labels = _labels(heatmap, live) + ["pad"] * padded
    every = max(1, math.ceil(len(labels) / MAX_TICKS))
    at = list(range(0, len(labels), every))
    ax.set_yticks(at, [labels[i] for i in at], fontsize=7)
    unowned = set(heatmap.get("unowned_rows") or [])
    for i, tick in zip(at, ax.get_yticklabels()):
        if i >= live or i in unowned:
            tick.set_color(_rgb(PAD_FG if i >= live else UNOWNED_LABEL))
    ax.set_ylabel(
        {
            "token": "live row: request R, token T (rRtT)",
            "block": "KV block (bB rR/tbT: block B holds\ntoken block T of request R)",
            "row": "row (first dimension)",
        }[row_kind],
        fontsize=8,
    )
    every = max(1, math.ceil(cols / MAX_COL_TICKS))
    at = list(range(0, cols, every))
    ax.set_xticks(at, [str(c * step) for c in at], fontsize=7)
    ax.set_xlabel(
        f"{'output columns' if row_kind == 'token' else 'values of the row, flattened'} (each cell: "
        f"max over {step} value{'s' if step != 1 else ''}; tick = first of the group)",
        fontsize=8,
    )


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - deferred: see draw()
    from matplotlib.figure import Figure  # noqa: PLC0415 - deferred: see draw()

    fig = Figure(figsize=(width, height), dpi=DPI, facecolor="white")
    FigureCanvasAgg(fig)  # the Agg canvas: no GUI backend, no pyplot state
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    # metadata: no "Software: Matplotlib version ..." chunk, so the bytes depend on the data only
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def render_png(heatmap: dict, *, title: str = "") -> bytes:
    """PNG bytes of the heatmap (see the module docstring for the picture and colour map)."""
    return draw(heatmap, title=title).png


def render_unavailable_png(reason: str = "") -> bytes:
    """A small PNG saying that no output diff is available (e.g. the capture failed)."""
    fig = _figure(5.0, 1.0)
    fig.text(0.02, 0.62, "No output diff available", fontsize=13, color="0.12", va="center")
    if reason:
        fig.text(0.02, 0.25, reason[:90], fontsize=8, color="0.12", va="center")
    return _png(fig)

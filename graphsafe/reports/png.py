"""A tiny RGB canvas, a 3x5 bitmap font and a pure-Python PNG encoder (zlib + struct).

No imaging library is needed to write a report.  The encoder writes 8-bit RGB,
non-interlaced, filter type 0 on every row: simple, and small enough for
heatmaps of a few hundred thousand pixels.

Example::

    c = Canvas(40, 12, background=(255, 255, 255))
    c.text(2, 2, "HI 42", (0, 0, 0))
    data = c.to_png()          # bytes starting with b"\\x89PNG"
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["Canvas", "encode_png", "text_width", "GLYPH_W", "GLYPH_H", "PNG_SIGNATURE"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

RGB = tuple[int, int, int]

# 3x5 glyphs, one string of 5 rows of 3 cells each ("#" = ink).  Lower case
# letters are drawn as upper case; characters without a glyph draw as "?".
_GLYPHS: dict[str, str] = {
    "A": ".#. #.# ### #.# #.#", "B": "##. #.# ##. #.# ##.", "C": ".## #.. #.. #.. .##",
    "D": "##. #.# #.# #.# ##.", "E": "### #.. ##. #.. ###", "F": "### #.. ##. #.. #..",
    "G": ".## #.. #.# #.# .##", "H": "#.# #.# ### #.# #.#", "I": "### .#. .#. .#. ###",
    "J": "..# ..# ..# #.# .#.", "K": "#.# #.# ##. #.# #.#", "L": "#.. #.. #.. #.. ###",
    "M": "#.# ### #.# #.# #.#", "N": "##. #.# #.# #.# #.#", "O": ".#. #.# #.# #.# .#.",
    "P": "##. #.# ##. #.. #..", "Q": ".#. #.# #.# ##. .##", "R": "##. #.# ##. #.# #.#",
    "S": ".## #.. .#. ..# ##.", "T": "### .#. .#. .#. .#.", "U": "#.# #.# #.# #.# ###",
    "V": "#.# #.# #.# #.# .#.", "W": "#.# #.# #.# ### #.#", "X": "#.# #.# .#. #.# #.#",
    "Y": "#.# #.# .#. .#. .#.", "Z": "### ..# .#. #.. ###",
    "0": "### #.# #.# #.# ###", "1": ".#. ##. .#. .#. ###", "2": "##. ..# .#. #.. ###",
    "3": "##. ..# .#. ..# ##.", "4": "#.# #.# ### ..# ..#", "5": "### #.. ##. ..# ##.",
    "6": ".## #.. ### #.# ###", "7": "### ..# .#. .#. .#.", "8": "### #.# ### #.# ###",
    "9": "### #.# ### ..# ##.",
    " ": "... ... ... ... ...", ".": "... ... ... ... .#.", ",": "... ... ... .#. #..",
    "-": "... ... ### ... ...", "+": "... .#. ### .#. ...", ":": "... .#. ... .#. ...",
    "/": "..# ..# .#. #.. #..", "|": ".#. .#. .#. .#. .#.", "(": ".#. #.. #.. #.. .#.",
    ")": ".#. ..# ..# ..# .#.", "=": "... ### ... ### ...", "_": "... ... ... ... ###",
    "<": "..# .#. #.. .#. ..#", ">": "#.. .#. ..# .#. #..", "?": "##. ..# .#. ... .#.",
    "[": "##. #.. #.. #.. ##.", "]": ".## ..# ..# ..# .##", "'": ".#. .#. ... ... ...",
    "%": "#.# ..# .#. #.. #.#", "*": "... #.# .#. #.# ...", "#": "#.# ### #.# ### #.#",
    "!": ".#. .#. .#. ... .#.",
}
GLYPH_W, GLYPH_H = 3, 5
_ADVANCE = GLYPH_W + 1  # one blank column between characters


def _bits(glyph: str) -> list[tuple[int, int]]:
    rows = glyph.split()
    return [(x, y) for y, row in enumerate(rows) for x, c in enumerate(row) if c == "#"]


_INK = {ch: _bits(g) for ch, g in _GLYPHS.items()}


def text_width(s: str, scale: int = 1) -> int:
    """Pixel width of ``s`` drawn at ``scale`` (no trailing gap)."""
    return max(0, len(s) * _ADVANCE * scale - scale)


class Canvas:
    """A width x height RGB image held as one bytearray per row."""

    def __init__(self, width: int, height: int, background: RGB = (255, 255, 255)):
        if width < 1 or height < 1:
            raise ValueError(f"a PNG needs at least 1x1 pixels, got {width}x{height}")
        self.width, self.height = int(width), int(height)
        row = bytes(background) * self.width
        self.rows = [bytearray(row) for _ in range(self.height)]

    def fill_rect(self, x: int, y: int, w: int, h: int, rgb: RGB) -> None:
        x0, y0 = max(0, x), max(0, y)
        x1, y1 = min(self.width, x + w), min(self.height, y + h)
        if x1 <= x0 or y1 <= y0:
            return
        span = bytes(rgb) * (x1 - x0)
        for yy in range(y0, y1):
            self.rows[yy][3 * x0 : 3 * x1] = span

    def hatch_rect(self, x: int, y: int, w: int, h: int, bg: RGB, fg: RGB, period: int = 4) -> None:
        """A rectangle of ``bg`` with ``fg`` diagonal stripes (padding, "no data")."""
        x0, x1 = max(0, x), min(self.width, x + w)
        if x1 <= x0:
            return
        fgb, bgb = bytes(fg), bytes(bg)
        # one row pattern per phase of the stripes: pixel (xx, yy) is ink when (xx + yy) % period == 0
        patterns = [
            b"".join(fgb if (xx + phase) % period == 0 else bgb for xx in range(x0, x1)) for phase in range(period)
        ]
        for yy in range(max(0, y), min(self.height, y + h)):
            self.rows[yy][3 * x0 : 3 * x1] = patterns[yy % period]

    def outline(self, x: int, y: int, w: int, h: int, rgb: RGB) -> None:
        self.fill_rect(x, y, w, 1, rgb)
        self.fill_rect(x, y + h - 1, w, 1, rgb)
        self.fill_rect(x, y, 1, h, rgb)
        self.fill_rect(x + w - 1, y, 1, h, rgb)

    def text(self, x: int, y: int, s: str, rgb: RGB, scale: int = 1) -> int:
        """Draw ``s`` with its top-left corner at (x, y); returns the x after the text."""
        for ch in s:
            ink = _INK.get(ch.upper(), _INK["?"])
            for gx, gy in ink:
                self.fill_rect(x + gx * scale, y + gy * scale, scale, scale, rgb)
            x += _ADVANCE * scale
        return x

    def pixel(self, x: int, y: int) -> RGB:
        r = self.rows[y]
        return (r[3 * x], r[3 * x + 1], r[3 * x + 2])

    def to_png(self) -> bytes:
        return encode_png(self.width, self.height, self.rows)


def _chunk(tag: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + tag + payload + struct.pack(">I", zlib.crc32(tag + payload) & 0xFFFFFFFF)


def encode_png(width: int, height: int, rows) -> bytes:
    """PNG bytes for ``height`` rows of ``3 * width`` RGB bytes each."""
    if len(rows) != height or any(len(r) != 3 * width for r in rows):
        raise ValueError(f"encode_png needs {height} rows of {3 * width} bytes")
    raw = b"".join(b"\x00" + bytes(r) for r in rows)  # filter type 0 (None) on every row
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return PNG_SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")

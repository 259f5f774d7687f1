"""Batches decoded from one drawn byte string (private): what ``step_sequences`` and ``capture_batches`` draw.

Drawn choice by choice, a batch costs Hypothesis about twenty choices (the request count, a query
and a sequence length per request, up to eight block-table swaps, the seed), and a checked step
paid about a millisecond for them on a GPU machine, as much as the step itself.  Here a batch is
one ``st.binary`` draw of a fixed length, decoded by :class:`Layout`:

* every field sits at a fixed offset, so each byte shrinks on its own (Hypothesis's bytes shrinker
  tries all zeros, then each byte towards 0);
* every field decodes monotonically from its bytes, and all-zero bytes decode to the simplest
  batch: one request (the fewest the caller allows), query length 1, sequence length equal to the
  query length, block table ``1, 2, 3, ...``, seed 0 (1 when 0 is the capture's seed);
* unshrunk, the fields are spread as the choice-by-choice strategies spread them: a sequence length
  is any value in its range, a block boundary or a neighbour, a split-KV boundary or a neighbour,
  or an extreme, a quarter of the time each (:func:`strategies._lengths.edge_values`), and
  block tables are shuffled over the whole pool.

Example::

    layout = Layout(spec, Support.ALWAYS, top=4, chunks=(64,))
    repeat, batch = layout.decode(bytes(layout.size), n_lo=1, n_hi=4)
    # batch == Batch(query_lens=(1,), seq_lens=(1,), block_table=((1,),), seed=0)
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from ..contract import Batch, CaptureSpec, Support
from ._lengths import edge_values
from ._tables import _MAX_SHUFFLED_POSITIONS, block_table
from ._validate import MAX_SEED

__all__ = ["Layout", "layout"]


#: a seed is any of 65536 values spread over ``[0, 2**31 - 1]``: a key for values, nothing more
_SEED_BYTES = 2


def _width(n: int) -> int:
    """Bytes that hold ``n`` distinct values."""
    return max(1, ((n - 1).bit_length() + 7) // 8)


class Layout:
    """Where each field of one batch sits in its bytes, for one ``spec``, ``level`` and at most ``top``
    requests; ``repeat`` and ``beyond`` add the flags a step of a sequence carries ("the previous batch
    again", "sequence lengths past the capture batch's")."""

    def __init__(
        self,
        spec: CaptureSpec,
        level: Support,
        top: int,
        chunks: tuple[int, ...],
        repeat: bool = False,
        beyond: bool = False,
    ):
        self.spec, self.level, self.top, self.chunks = spec, level, top, chunks
        self.w_n, self.w_q = _width(top), _width(spec.max_query_len)
        # at least two raw values per decoded one: an even spread, and few bytes for shrinking to clear
        self.w_s, self.w_pool = _width(2 * (spec.max_seq_len + 1)), _width(2 * spec.num_blocks)
        off = 0

        def field(width: int) -> int:
            nonlocal off
            at, off = off, off + width
            return at

        def optional(width: int, present: bool) -> int | None:  # a field only some layouts have
            return field(width) if present else None

        self.o_repeat = optional(1, repeat)
        self.o_n = field(self.w_n)
        self.o_beyond = optional(1, beyond)
        self.o_uniform = optional(self.w_q, level is Support.UNIFORM_BATCH)
        self.o_seed = field(_SEED_BYTES)
        self.o_swaps = field(_MAX_SHUFFLED_POSITIONS * self.w_pool)
        self.w_q_req = self.w_q if level is Support.ALWAYS else 0
        self.w_req = self.w_q_req + 1 + self.w_s  # query length (ALWAYS), length branch, length value
        self.o_reqs = field(top * self.w_req)
        self.size = off
        #: the strategy for one batch's bytes
        self.bytes: SearchStrategy[bytes] = st.binary(min_size=self.size, max_size=self.size)

    def decode(
        self,
        data: bytes,
        *,
        n_lo: int = 1,
        n_hi: int | None = None,
        avoid: int | None = None,
        beyond_lo: int | None = None,
        hi_cap: int | None = None,
        num_slots: int = 0,
    ) -> tuple[bool, Batch]:
        """``(repeat, batch)`` from ``data``: ``n_lo..n_hi`` requests (``n_hi`` at most ``top``), a seed other
        than ``avoid``, sequence lengths from ``beyond_lo`` on when the beyond flag is set and at most
        ``hi_cap`` where the query length allows."""
        spec = self.spec

        def below(at: int, width: int, n: int) -> int:  # in [0, n), monotone in the bytes, 0 for zeros
            return int.from_bytes(data[at : at + width], "big") * n >> (8 * width)

        # a quarter of the steps repeat the one before: the rate the choice-by-choice form had
        repeat = self.o_repeat is not None and data[self.o_repeat] >= 192
        n_hi = self.top if n_hi is None else n_hi
        n = n_lo + below(self.o_n, self.w_n, n_hi - n_lo + 1)
        lo_floor = (
            beyond_lo if beyond_lo is not None and self.o_beyond is not None and data[self.o_beyond] >= 128 else 1
        )
        hi_base = spec.max_seq_len if hi_cap is None else min(hi_cap, spec.max_seq_len)
        if self.level is Support.UNIFORM_SINGLE_TOKEN_DECODE:
            uniform: int | None = 1
        elif self.o_uniform is not None:  # (the layout has the field for UNIFORM_BATCH alone)
            lo, hi = spec.uniform_lengths()
            uniform = lo + below(self.o_uniform, self.w_q, hi - lo + 1)
        else:
            uniform = None
        qs, ss = [], []
        for r in range(n):
            at = self.o_reqs + r * self.w_req
            q = uniform if uniform is not None else 1 + below(at, self.w_q, spec.max_query_len)
            at += self.w_q_req
            lo = max(q, lo_floor)
            hi = max(lo, hi_base)
            qs.append(q)
            ss.append(self._length(data[at], data[at + 1 : at + 1 + self.w_s], lo, hi))

        def swap(k: int, i: int, hi: int) -> int:
            return i + below(self.o_swaps + k * self.w_pool, self.w_pool, hi - i + 1)

        table = block_table(spec, tuple(ss), True, swap)
        seed = below(self.o_seed, _SEED_BYTES, MAX_SEED + (0 if avoid is not None else 1))
        if avoid is not None and seed >= avoid:
            seed += 1
        return repeat, Batch(
            query_lens=tuple(qs), seq_lens=tuple(ss), block_table=table, seed=seed, num_slots=num_slots
        )

    def _length(self, branch: int, value: bytes, lo: int, hi: int) -> int:
        """A sequence length in ``[lo, hi]``: a quarter each (where they exist) any value, a block edge, a
        split-KV edge, an extreme; the branches and every list ascend, so zeros give ``lo``."""
        choices = _length_choices(lo, hi, self.spec.block_size, self.chunks)
        pick = choices[branch * len(choices) >> 8]
        k = int.from_bytes(value, "big")
        if pick is None:
            return lo + (k * (hi - lo + 1) >> (8 * len(value)))
        return pick[k * len(pick) >> (8 * len(value))]


@functools.lru_cache(maxsize=4096)
def _length_choices(lo: int, hi: int, block_size: int, chunks: tuple[int, ...]) -> tuple:
    """The branches of :func:`strategies._lengths.seq_len_strategy`: None for "any value", else a sorted list."""
    block_edges, split_edges = edge_values(lo, hi, block_size, chunks)
    return (None, *(e for e in (block_edges, split_edges) if e), tuple(sorted({lo, hi})))


@functools.lru_cache(maxsize=1024)
def layout(
    spec: CaptureSpec,
    level: Support,
    top: int,
    chunks: tuple[int, ...] = (64,),
    repeat: bool = False,
    beyond: bool = False,
) -> Layout:
    """The (cached) :class:`Layout` for these arguments."""
    return Layout(spec, level, top, chunks, repeat, beyond)

"""Edge values for sequence lengths (private).

The lengths that break attention kernels cluster at a few places: the
shortest sequence, block boundaries (``k * block_size``) and their
neighbours, split-KV chunk boundaries and the captured maximum.  These
helpers compute those values once per ``(lo, hi, block_size, chunks)`` and
build the per-request strategy that draws them often while still shrinking
to ``lo`` (the query length: the shortest valid sequence).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from ..errors import UsageError

DEFAULT_SPLIT_KV: tuple[int, ...] = (64,)


def normalize_chunks(split_kv: int | Iterable[int] | None) -> tuple[int, ...]:
    """``split_kv`` as a sorted tuple of positive chunk sizes (default ``(64,)``)."""
    if split_kv is None:
        return DEFAULT_SPLIT_KV
    if isinstance(split_kv, bool):
        raise UsageError(f"split_kv must be a positive int or a sequence of them, got {split_kv!r}")
    if isinstance(split_kv, int):
        chunks: tuple[int, ...] = (split_kv,)
    else:
        try:
            chunks = tuple(split_kv)
        except TypeError:
            raise UsageError(f"split_kv must be a positive int or a sequence of them, got {split_kv!r}") from None
    if not chunks:
        raise UsageError("split_kv must name at least one chunk size (or be None for the default 64)")
    for c in chunks:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise UsageError(f"split_kv chunk sizes must be positive ints, got {c!r} in {split_kv!r}")
    return tuple(sorted(set(chunks)))


def _around_multiples(step: int, lo: int, hi: int) -> list[int]:
    """Every ``k * step`` (k >= 1) and its neighbours +-1, clipped to ``[lo, hi]``."""
    out: set[int] = set()
    k = max(1, (lo - 1) // step)
    while (k * step) - 1 <= hi:
        m = k * step
        for v in (m - 1, m, m + 1):
            if lo <= v <= hi:
                out.add(v)
        k += 1
    return sorted(out)


@functools.lru_cache(maxsize=4096)
def edge_values(lo: int, hi: int, block_size: int, chunks: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(block_edges, split_edges)``: sorted edge lengths within ``[lo, hi]``."""
    block_edges = tuple(_around_multiples(block_size, lo, hi))
    split: set[int] = set()
    for c in chunks:
        split.update(_around_multiples(c, lo, hi))
    return block_edges, tuple(sorted(split))


@functools.lru_cache(maxsize=4096)
def seq_len_strategy(lo: int, hi: int, block_size: int, chunks: tuple[int, ...]) -> SearchStrategy[int]:
    """One sequence length in ``[lo, hi]``: any value, or (3 times in 4) an edge value.

    The first branch is ``integers(lo, hi)`` and every ``sampled_from`` list
    is sorted ascending, so the length shrinks towards ``lo``.
    """
    if not 1 <= lo <= hi:
        raise UsageError(f"sequence length range [{lo}, {hi}] is empty")
    block_edges, split_edges = edge_values(lo, hi, block_size, chunks)
    branches: list[SearchStrategy[int]] = [st.integers(lo, hi)]
    if block_edges:
        branches.append(st.sampled_from(block_edges))
    if split_edges:
        branches.append(st.sampled_from(split_edges))
    # the extremes: the shortest valid length (1 when the query length is 1)
    # and the captured maximum.
    branches.append(st.sampled_from(sorted({lo, hi})))
    return st.one_of(branches)

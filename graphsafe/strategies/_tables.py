"""Block tables: distinct physical block ids per request, shuffled by a partial Fisher-Yates draw."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..contract import CaptureSpec
from ..errors import UsageError
from ._validate import _ints

#: How many block-table positions one batch shuffles at most.  Each shuffled
#: position costs one Hypothesis choice; a batch at max_seq_len with block size
#: 1 would otherwise need thousands.  The positions are spread over the whole
#: table (every request's first block included), the rest keep pool order.
_MAX_SHUFFLED_POSITIONS = 8


def _shuffle_positions(starts: list[int], total: int) -> list[int]:
    """Which flat block-table positions to shuffle: all, or a spread-out subset."""
    if total <= _MAX_SHUFFLED_POSITIONS:
        return list(range(total))
    chosen = set(starts[:_MAX_SHUFFLED_POSITIONS])
    room = _MAX_SHUFFLED_POSITIONS - len(chosen)
    for k in range(room):
        chosen.add(k * total // room)
    return sorted(chosen)


def _draw_block_table(
    draw: Any, spec: CaptureSpec, seq_lens: tuple[int, ...], reserve_null_block: bool, shuffle: bool
) -> tuple[tuple[int, ...], ...]:
    """Distinct block ids from ``range(first, num_blocks)``, identity order unless shuffled.

    A partial Fisher-Yates shuffle over the virtual pool ``first .. num_blocks-1``:
    shuffled position ``i`` swaps with a drawn position ``j >= i``.  Every draw
    shrinks to ``j == i`` (no swap), so tables shrink to ``first, first+1, ...``
    in request order, while unshrunk draws use the whole pool (high ids too).
    """
    swap = (lambda k, i, hi: draw(_ints(i, hi))) if shuffle else None
    return block_table(spec, seq_lens, reserve_null_block, swap)


def block_table(
    spec: CaptureSpec,
    seq_lens: tuple[int, ...],
    reserve_null_block: bool,
    swap: Callable[[int, int, int], int] | None,
) -> tuple[tuple[int, ...], ...]:
    """The table of :func:`_draw_block_table`, with ``swap(k, i, hi)`` giving the position in ``[i, hi]``
    that the ``k``-th shuffled position ``i`` swaps with (None: identity order)."""
    first = 1 if reserve_null_block else 0
    pool = spec.num_blocks - first
    needs = [math.ceil(s / spec.block_size) for s in seq_lens]
    total = sum(needs)
    if total > pool:
        raise UsageError(
            f"block_tables: the batch needs {total} blocks but spec.num_blocks={spec.num_blocks} "
            f"leaves only {pool} (reserve_null_block={reserve_null_block})"
        )
    swapped: dict[int, int] = {}  # virtual pool: position -> value (default: itself)
    if swap is not None and pool > 1:
        starts, acc = [], 0
        for n in needs:
            starts.append(acc)
            acc += n
        for k, i in enumerate(_shuffle_positions(starts, total)):
            j = swap(k, i, pool - 1)
            if j != i:
                vi, vj = swapped.get(i, i), swapped.get(j, j)
                swapped[i], swapped[j] = vj, vi
    flat = [first + swapped.get(i, i) for i in range(total)]
    table, acc = [], 0
    for n in needs:
        table.append(tuple(flat[acc : acc + n]))
        acc += n
    return tuple(table)

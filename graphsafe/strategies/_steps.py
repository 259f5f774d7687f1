"""Step sequences: the batches one example replays, one after another.

Each step is one byte string decoded into a batch (:mod:`strategies._encoded`): an example of a few
steps costs Hypothesis about ten choices, not the fifty-odd of drawing every field on its own.
"""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from ..contract import Batch, CaptureSpec, Support
from ._encoded import layout
from ._lengths import DEFAULT_SPLIT_KV
from ._validate import MaybeStrategy, _check_capture, _check_spec, _check_steps, _check_support, _get, _is_strategy

# -- step_sequences -------------------------------------------------------------------

_REPEAT = object()


def step_sequences(
    spec: MaybeStrategy[CaptureSpec],
    *,
    support: MaybeStrategy[Support] = Support.ALWAYS,
    min_steps: MaybeStrategy[int] = 1,
    max_steps: MaybeStrategy[int] = 6,
    beyond_capture: MaybeStrategy[bool] = False,
    capture_batch: MaybeStrategy[Batch] | None = None,
) -> SearchStrategy[list[Batch]]:
    """Lists of ``min_steps..max_steps`` batches to replay one after another.

    The sequences exercise what goes wrong across replays:

    * growing then shrinking batch sizes (stale padding from a larger step);
    * uniform and non-uniform query lengths in one sequence (where
      ``support`` is ``ALWAYS``);
    * the identical batch twice in a row (same seed too: nondeterminism);
    * most sequences ``max_steps`` long (a drawn boolean fills half of them
      up; the rest as ``st.lists`` spreads them), so that a fuzzer's costs per
      example buy more steps;
    * with ``beyond_capture=True`` and a ``capture_batch``: steps whose
      sequence lengths all lie past ``capture_batch.max_seq_len`` (and within
      ``spec.max_seq_len``).  Without a capture batch the captured worst case
      is ``spec.max_seq_len`` and the flag changes nothing.

    With ``beyond_capture=False`` lengths only respect ``spec.max_seq_len``.
    When ``capture_batch`` is given, every step's seed differs from
    ``capture_batch.seed`` and no step has more requests than
    ``capture_batch.num_slots``.  Batches are unpadded (the checker pads).
    Shrinks to ``[Batch(query_lens=(1,), seq_lens=(1,), block_table=((1,),), seed=0)]``
    (seed 1 when the capture seed is 0).

    Example::

        @given(step_sequences(spec, support=Support.UNIFORM_BATCH, max_steps=4))
        def test_replays(steps):
            for batch in steps:
                ...
    """
    if not _is_strategy(support):
        _check_support(support)
    if not _is_strategy(min_steps) and not _is_strategy(max_steps):
        _check_steps(min_steps, max_steps)
    if not _is_strategy(spec):
        _check_spec(spec)
        if capture_batch is not None and not _is_strategy(capture_batch):
            _check_capture(spec, capture_batch)

    @st.composite
    def _steps(draw: Any) -> list[Batch]:
        sp = _check_spec(_get(draw, spec))
        level = _check_support(_get(draw, support))
        lo_steps, hi_steps = _check_steps(_get(draw, min_steps), _get(draw, max_steps))
        beyond = bool(_get(draw, beyond_capture))
        cap = _get(draw, capture_batch)
        if cap is not None:
            _check_capture(sp, cap)
        top = sp.max_reqs if cap is None else min(sp.max_reqs, cap.num_slots)
        avoid = None if cap is None else cap.seed
        beyond_lo = None
        if beyond and cap is not None and cap.max_seq_len < sp.max_seq_len:
            beyond_lo = cap.max_seq_len + 1
        lay = layout(sp, level, top, DEFAULT_SPLIT_KV, repeat=True, beyond=beyond_lo is not None)

        def step(data: bytes, n_lo: int = 1, n_hi: int = top) -> tuple[bool, Batch]:
            return lay.decode(data, n_lo=n_lo, n_hi=n_hi, avoid=avoid, beyond_lo=beyond_lo)

        # Sometimes (a drawn boolean, shrinking to False) end the sequence with
        # a forced "larger, then smaller" pair: stale padding from the larger.
        force = top >= 2 and hi_steps >= 2 and draw(_BOOLS)
        lo_items, hi_items = max(0 if force else 1, lo_steps - 2 * force), hi_steps - 2 * force
        items = draw(_step_lists(lay.bytes, lo_items, hi_items))
        pair = [draw(lay.bytes), draw(lay.bytes)] if force else []
        # Half the time (a drawn boolean, shrinking to False) fill the sequence up to ``max_steps``: a
        # fuzzer pays its costs per example (drawing, a fresh eager instance, a reset) once for all the
        # steps of a sequence, and a list alone stops short of its maximum more often than not.  The
        # extra steps are drawn last, so that shrinking drops them whole; they replay before the pair.
        if len(items) < hi_items and draw(_BOOLS):
            items += draw(_step_lists(lay.bytes, hi_items - len(items), hi_items - len(items)))
        out: list[Batch] = []
        for item in items:
            repeat, batch = step(item)
            # "the same batch again" (the flag byte); with nothing before it, the fresh one.
            out.append(out[-1] if repeat and out else batch)
        if force:
            big = step(pair[0], 2)[1]
            out += [big, step(pair[1], 1, big.num_reqs - 1)[1]]
        return out

    return _steps()


# Strategy objects built inside a draw are validated by Hypothesis every time: the same ones are reused
_BOOLS = st.booleans()


@functools.lru_cache(maxsize=4096)
def _step_lists(step: SearchStrategy[bytes], min_size: int, max_size: int) -> SearchStrategy[list]:
    """``min_size..max_size`` steps' bytes."""
    return st.lists(step, min_size=min_size, max_size=max_size)

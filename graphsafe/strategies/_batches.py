"""Specs, query and sequence lengths, block tables and batches."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from ..contract import Batch, CaptureSpec, Support
from ._encoded import layout
from ._lengths import DEFAULT_SPLIT_KV, normalize_chunks, seq_len_strategy
from ._tables import _draw_block_table
from ._validate import (
    MAX_SEED,
    MaybeStrategy,
    _check_count,
    _check_given,
    _check_plain_slots,
    _check_query_lens,
    _check_seed,
    _check_seq_lens,
    _check_spec,
    _check_support,
    _get,
    _ints,
    _is_strategy,
)

_MAX_REQS_CHOICES = (1, 2, 4, 8, 16)
_BLOCK_SIZE_CHOICES = (1, 4, 8, 16, 32, 64)
_DEFAULT_MAX_SEQ_LEN = 512


def _draw_lengths(
    draw: Any,
    spec: CaptureSpec,
    query_lens: tuple[int, ...],
    chunks: tuple[int, ...],
    *,
    lo_floor: int = 1,
    hi_cap: int | None = None,
) -> tuple[int, ...]:
    """One seq length per query length, in ``[max(q, lo_floor), max(q, hi_cap)]``."""
    hi_base = spec.max_seq_len if hi_cap is None else min(hi_cap, spec.max_seq_len)
    out = []
    for q in query_lens:
        lo = max(q, lo_floor)
        hi = max(lo, hi_base)
        out.append(draw(seq_len_strategy(lo, hi, spec.block_size, chunks)))
    return tuple(out)


# -- capture_specs -------------------------------------------------------------


def capture_specs(
    *,
    max_reqs: MaybeStrategy[int] = st.sampled_from(_MAX_REQS_CHOICES),
    max_query_len: MaybeStrategy[int] = st.integers(1, 4),
    max_seq_len: MaybeStrategy[int] | None = None,
    block_size: MaybeStrategy[int] = st.sampled_from(_BLOCK_SIZE_CHOICES),
) -> SearchStrategy[CaptureSpec]:
    """Valid :class:`~graphsafe.CaptureSpec` values.

    Defaults: ``max_reqs`` from 1, 2, 4, 8, 16; ``max_query_len`` in 1..4;
    ``block_size`` from 1, 4, 8, 16, 32, 64; ``max_seq_len`` in
    ``max_query_len..512``.  ``capture_sizes`` is either empty (the spec's
    default sizes) or a subset of the powers of two below ``max_reqs`` plus
    ``max_reqs`` itself.  ``num_blocks`` is left at the spec's default.
    Shrinks to ``CaptureSpec(max_reqs=1, max_query_len=1, max_seq_len=1,
    block_size=1)``.

    Example::

        @given(capture_specs(max_reqs=8, block_size=st.sampled_from([16, 32])))
        def test_setup(spec):
            assert spec.max_reqs == 8
    """

    @st.composite
    def _specs(draw: Any) -> CaptureSpec:
        reqs = _check_count("max_reqs", _get(draw, max_reqs), 1, 1 << 20)
        mq = _check_count("max_query_len", _get(draw, max_query_len), 1, 1 << 20)
        bs = _check_count("block_size", _get(draw, block_size), 1, 1 << 20)
        if max_seq_len is None:
            seq = draw(st.integers(mq, max(mq, _DEFAULT_MAX_SEQ_LEN)))
        else:
            seq = _check_count("max_seq_len", _get(draw, max_seq_len), mq, 1 << 30, " (it must be >= max_query_len)")
        powers = []
        p = 1
        while p < reqs:
            powers.append(p)
            p *= 2
        if draw(st.booleans()):
            picked = draw(st.lists(st.sampled_from(powers), unique=True)) if powers else []
            sizes = tuple(sorted(set(picked) | {reqs}))
        else:
            sizes = ()
        return CaptureSpec(max_reqs=reqs, max_query_len=mq, max_seq_len=seq, block_size=bs, capture_sizes=sizes)

    return _specs()


# -- decode_lengths --------------------------------------------------------------


def decode_lengths(
    *,
    support: MaybeStrategy[Support],
    spec: MaybeStrategy[CaptureSpec],
    num_reqs: MaybeStrategy[int] | None = None,
) -> SearchStrategy[tuple[int, ...]]:
    """Per-request query lengths (a tuple of ints) that ``support`` allows.

    * ``UNIFORM_SINGLE_TOKEN_DECODE``: every length is 1.
    * ``UNIFORM_BATCH``: one ``u = 1 + k`` (``k >= 0`` speculative tokens,
      ``u <= spec.max_query_len``; exactly ``spec.uniform_query_len`` when set) for every request;
      shrinks to ``u = 1``.
    * ``ALWAYS``: each request independently in ``[1, spec.max_query_len]``
      (mixed prefill and decode); shrinks to all 1.
    * ``NEVER``: raises ``UsageError``: nothing may be captured.

    ``num_reqs`` defaults to ``integers(1, spec.max_reqs)``.

    Example::

        decode_lengths(support=Support.UNIFORM_BATCH, spec=spec, num_reqs=4)
        # draws e.g. (3, 3, 3, 3)
    """
    if not _is_strategy(support):
        _check_support(support)
    if not _is_strategy(spec):
        _check_spec(spec)
        if num_reqs is not None and not _is_strategy(num_reqs):
            _check_count("num_reqs", num_reqs, 1, spec.max_reqs, " (spec.max_reqs)")

    @st.composite
    def _lengths(draw: Any) -> tuple[int, ...]:
        level = _check_support(_get(draw, support))
        sp = _check_spec(_get(draw, spec))
        n = num_reqs
        n = draw(_ints(1, sp.max_reqs)) if n is None else _get(draw, n)
        _check_count("num_reqs", n, 1, sp.max_reqs, " (spec.max_reqs)")
        return _draw_query_lens(draw, level, sp, n)

    return _lengths()


def _draw_query_lens(draw: Any, level: Support, spec: CaptureSpec, n: int) -> tuple[int, ...]:
    if level is Support.UNIFORM_SINGLE_TOKEN_DECODE:
        return (1,) * n
    if level is Support.UNIFORM_BATCH:
        lo, hi = spec.uniform_lengths()
        return (lo + draw(_ints(0, hi - lo)),) * n
    q = st.integers(1, spec.max_query_len)
    return tuple(draw(q) for _ in range(n))


# -- seq_lens ----------------------------------------------------------------------


def seq_lens(
    *,
    spec: MaybeStrategy[CaptureSpec],
    query_lens: MaybeStrategy[Iterable[int]],
    split_kv: MaybeStrategy[int | Iterable[int]] | None = None,
) -> SearchStrategy[tuple[int, ...]]:
    """Per-request sequence (context) lengths, each in ``[query_len, spec.max_seq_len]``.

    Three draws in four land on a length that breaks kernels: the shortest
    valid length (1 where the query length is 1), a block boundary
    ``k * block_size`` or its neighbours +-1, a split-KV boundary (multiples
    of each ``split_kv`` chunk size, default 64, and their neighbours) or
    ``spec.max_seq_len``.  Shrinks each length to its query length.

    Example::

        seq_lens(spec=spec, query_lens=(1, 4), split_kv=128)
        # draws e.g. (16, 129)
    """
    if split_kv is not None and not _is_strategy(split_kv):
        normalize_chunks(split_kv)
    if not _is_strategy(spec):
        _check_spec(spec)
        if not _is_strategy(query_lens):
            _check_query_lens(spec, query_lens)

    @st.composite
    def _seqs(draw: Any) -> tuple[int, ...]:
        sp = _check_spec(_get(draw, spec))
        qs = _check_query_lens(sp, _get(draw, query_lens))
        chunks = normalize_chunks(_get(draw, split_kv))
        return _draw_lengths(draw, sp, qs, chunks)

    return _seqs()


# -- block_tables ------------------------------------------------------------------


def block_tables(
    *,
    spec: MaybeStrategy[CaptureSpec],
    seq_lens: MaybeStrategy[Iterable[int]],
    reserve_null_block: MaybeStrategy[bool] = True,
    shuffle: MaybeStrategy[bool] = True,
) -> SearchStrategy[tuple[tuple[int, ...], ...]]:
    """Per request a tuple of ``ceil(seq_len / block_size)`` physical block ids.

    Ids are distinct across the whole batch and come from
    ``range(1 if reserve_null_block else 0, spec.num_blocks)``.  With
    ``shuffle=True`` they are drawn from the whole pool in shuffled order
    (a partial Fisher-Yates shuffle), shrinking towards identity order
    ``1, 2, 3, ...`` (request by request); with ``shuffle=False`` they are
    always in identity order.

    Example::

        block_tables(spec=CaptureSpec(block_size=16), seq_lens=(40, 5))
        # shrinks to ((1, 2, 3), (4,)); draws e.g. ((17, 3, 60), (9,))
    """
    if not _is_strategy(spec):
        _check_spec(spec)
        if not _is_strategy(seq_lens):
            _check_seq_lens(spec, seq_lens)

    @st.composite
    def _tables(draw: Any) -> tuple[tuple[int, ...], ...]:
        sp = _check_spec(_get(draw, spec))
        ss = _check_seq_lens(sp, _get(draw, seq_lens))
        return _draw_block_table(draw, sp, ss, bool(_get(draw, reserve_null_block)), bool(_get(draw, shuffle)))

    return _tables()


# -- batches -----------------------------------------------------------------------


@st.composite
def _request(
    draw: Any, spec: CaptureSpec, q: int | None, chunks: tuple[int, ...], lo_floor: int, hi_cap: int | None
) -> tuple[int, int]:
    """One request's ``(query_len, seq_len)``; ``q=None`` draws it in ``[1, max_query_len]``."""
    if q is None:
        q = draw(_ints(1, spec.max_query_len))
    return q, _draw_lengths(draw, spec, (q,), chunks, lo_floor=lo_floor, hi_cap=hi_cap)[0]


_request = functools.lru_cache(maxsize=4096)(_request)


@st.composite
def _table(draw: Any, spec: CaptureSpec, seq_lens: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    return _draw_block_table(draw, spec, seq_lens, True, True)


_table = functools.lru_cache(maxsize=4096)(_table)


@st.composite
def _batch(
    draw: Any,
    spec: CaptureSpec,
    level: Support,
    num_reqs: SearchStrategy[int] | int,
    seeds: SearchStrategy[int] | int,
    *,
    num_slots: int | None = None,
    lo_floor: int = 1,
    hi_cap: int | None = None,
    chunks: tuple[int, ...] = (64,),
) -> Batch:
    # Layout matters for shrinking: the request count, then one span per
    # request (query and sequence length together), then the block table and
    # the seed as one span each.  Lowering the count then deletes a whole
    # request span, which Hypothesis's shrinker does well.
    n = _get(draw, num_reqs)
    if level is Support.UNIFORM_SINGLE_TOKEN_DECODE:
        uniform: int | None = 1
    elif level is Support.UNIFORM_BATCH:
        lo, hi = spec.uniform_lengths()
        uniform = lo + draw(_ints(0, hi - lo))
    else:
        uniform = None
    reqs = [draw(_request(spec, uniform, chunks, lo_floor, hi_cap)) for _ in range(n)]
    qs = tuple(q for q, _ in reqs)
    ss = tuple(s for _, s in reqs)
    table = draw(_table(spec, ss))
    seed = _check_seed(_get(draw, seeds))
    return Batch(query_lens=qs, seq_lens=ss, block_table=table, seed=seed, num_slots=num_slots or 0)


_batch = functools.lru_cache(maxsize=4096)(_batch)


def batches(
    spec: MaybeStrategy[CaptureSpec],
    *,
    support: MaybeStrategy[Support] = Support.ALWAYS,
    num_reqs: MaybeStrategy[int] | None = None,
    seed: MaybeStrategy[int] | None = None,
    num_slots: MaybeStrategy[int] | None = None,
) -> SearchStrategy[Batch]:
    """A valid :class:`~graphsafe.Batch` that fits ``spec`` and that ``support`` allows.

    Query lengths come from :func:`decode_lengths`, sequence lengths from
    :func:`seq_lens`, block tables from :func:`block_tables` (null block 0
    reserved, shuffled).  ``seed`` defaults to ``integers(0, 2**31 - 1)``.
    ``num_reqs`` defaults to ``integers(1, num_slots or spec.max_reqs)``;
    ``num_slots`` defaults to ``num_reqs`` (unpadded: the checker pads).
    Shrinks to ``Batch(query_lens=(1,), seq_lens=(1,), block_table=((1,),), seed=0)``.

    Example::

        @given(batches(spec, support=Support.UNIFORM_SINGLE_TOKEN_DECODE, num_reqs=st.integers(2, 4)))
        def test_decode(batch):
            assert set(batch.query_lens) == {1}
    """
    if _check_given(spec, support, seed):
        _check_plain_slots(spec, num_reqs, num_slots)

    @st.composite
    def _batches(draw: Any) -> Batch:
        sp = _check_spec(_get(draw, spec))
        level = _check_support(_get(draw, support))
        slots = _get(draw, num_slots)
        if slots is not None:
            _check_count("num_slots", slots, 1, sp.max_reqs, " (spec.max_reqs)")
        top = sp.max_reqs if slots is None else slots
        hint = " (num_slots)" if slots is not None else " (spec.max_reqs)"
        if num_reqs is None:
            n: Any = _ints(1, top)
        elif _is_strategy(num_reqs):
            n = num_reqs.map(lambda v: _check_count("num_reqs", v, 1, top, hint))
        else:
            n = _check_count("num_reqs", num_reqs, 1, top, hint)
        seeds = _ints(0, MAX_SEED) if seed is None else seed
        return draw(_batch(sp, level, n, seeds, num_slots=slots))

    return _batches()


# -- capture_batches ----------------------------------------------------------------


def capture_batches(
    spec: MaybeStrategy[CaptureSpec],
    *,
    support: MaybeStrategy[Support] = Support.ALWAYS,
    num_slots: MaybeStrategy[int],
    seed: MaybeStrategy[int] | None = None,
) -> SearchStrategy[Batch]:
    """A drawn capture batch (smaller than the worst case) padded to ``num_slots``.

    ``num_reqs`` is drawn in ``1..num_slots`` and the lengths as in
    :func:`batches`, except that every sequence length stays below
    ``spec.max_seq_len`` wherever its query length allows, so that replays
    can go past the captured lengths (see ``step_sequences(beyond_capture=True)``).
    The result has ``num_slots`` slots (padding past ``num_reqs``).

    Example::

        cap = capture_batches(spec, support=Support.UNIFORM_BATCH, num_slots=4)
        # draws e.g. Batch(q=[2, 2], seq=[17, 64], num_slots=4, seed=5)
    """
    if _check_given(spec, support, seed):
        if not _is_strategy(num_slots):
            _check_count("num_slots", num_slots, 1, spec.max_reqs, " (spec.max_reqs)")

    @st.composite
    def _capture(draw: Any) -> Batch:
        sp = _check_spec(_get(draw, spec))
        level = _check_support(_get(draw, support))
        slots = _check_count("num_slots", _get(draw, num_slots), 1, sp.max_reqs, " (spec.max_reqs)")
        lay = layout(sp, level, slots, DEFAULT_SPLIT_KV)  # one draw decoded (strategies._encoded)
        batch = lay.decode(draw(lay.bytes), n_hi=slots, hi_cap=sp.max_seq_len - 1, num_slots=slots)[1]
        if seed is not None:
            batch = dataclasses.replace(batch, seed=_check_seed(_get(draw, seed)))
        return batch

    return _capture()

"""Hypothesis strategies for graphsafe's contract: specs, batches and replay sequences.

In the style of ``hypothesis.extra.numpy``: every argument after the
positional ``spec`` is keyword-only and accepts either a plain value or a
Hypothesis strategy for that value (a strategy is drawn once per example).
A ``spec`` may itself be a strategy such as :func:`capture_specs`.

Every strategy yields values that pass ``CaptureSpec.validate_batch`` and
``Batch`` construction, and shrinks towards the simplest case a human would
write by hand: few requests, query length 1, sequence length equal to the
query length, block tables ``1, 2, 3, ...`` in order, seed 0.

Example::

    from hypothesis import given
    from graphsafe import CaptureSpec, Support
    from strategies import batches, step_sequences

    spec = CaptureSpec(max_reqs=8, max_query_len=2, max_seq_len=256, block_size=16)

    @given(batches(spec, support=Support.UNIFORM_BATCH))
    def test_prepare_accepts(batch):
        spec.validate_batch(batch)
"""

from __future__ import annotations

import functools

import math
from typing import Any, Iterable, TypeVar, Union

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from graphsafe.contract import Batch, CaptureSpec, Support

from ._lengths import normalize_chunks, seq_len_strategy

__all__ = [
    "capture_specs",
    "decode_lengths",
    "seq_lens",
    "block_tables",
    "batches",
    "capture_batches",
    "step_sequences",
]

T = TypeVar("T")
MaybeStrategy = Union[T, SearchStrategy[T]]

MAX_SEED = 2**31 - 1
_MAX_REQS_CHOICES = (1, 2, 4, 8, 16)
_BLOCK_SIZE_CHOICES = (1, 4, 8, 16, 32, 64)
_DEFAULT_MAX_SEQ_LEN = 512
#: How many block-table positions one batch shuffles at most.  Each shuffled
#: position costs one Hypothesis choice; a batch at max_seq_len with block size
#: 1 would otherwise need thousands.  The positions are spread over the whole
#: table (every request's first block included), the rest keep pool order.
_MAX_SHUFFLED_POSITIONS = 8  # each shuffled position costs a draw: keep batches cheap to generate


# -- helpers -------------------------------------------------------------------


# Strategies built inside draws are validated by Hypothesis each time they are new objects; the same
# bounds give the same (cached) object, validated once.  This halves the cost of drawing a plan.
_ints = functools.lru_cache(maxsize=4096)(st.integers)


def _get(draw: Any, value: Any) -> Any:
    """Draw ``value`` when it is a strategy, else return it unchanged."""
    return draw(value) if isinstance(value, SearchStrategy) else value


def _is_strategy(value: Any) -> bool:
    return isinstance(value, SearchStrategy)


def _check_spec(spec: Any) -> CaptureSpec:
    if not isinstance(spec, CaptureSpec):
        raise ValueError(f"spec must be a graphsafe.CaptureSpec (or a strategy for one), got {spec!r}")
    return spec


def _check_support(support: Any) -> Support:
    try:
        level = Support(support)
    except ValueError:
        raise ValueError(f"support must be a graphsafe.Support, got {support!r}") from None
    if level is Support.NEVER:
        raise ValueError(
            "support=Support.NEVER: a backend with Support.NEVER must not be captured at all, "
            "so there is no batch a captured graph may serve; test it eagerly instead"
        )
    return level


def _check_count(name: str, value: Any, lo: int, hi: int, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int (or a strategy for one), got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}]{hint}, got {value}")
    return value


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an int in [0, 2**31 - 1] (or a strategy for one), got {seed!r}")
    return seed


@functools.lru_cache(maxsize=1024)
def _seeds_avoiding(avoid: int | None) -> SearchStrategy[int]:
    """Seeds in ``[0, 2**31 - 1]`` except ``avoid``; shrinks to 0 (to 1 when 0 is avoided)."""
    if avoid is None:
        return _ints(0, MAX_SEED)
    return _ints(0, MAX_SEED - 1).map(lambda s: s + 1 if s >= avoid else s)


def _draw_lengths(
    draw: Any, spec: CaptureSpec, query_lens: tuple[int, ...], chunks: tuple[int, ...], *, lo_floor: int = 1, hi_cap: int | None = None
) -> tuple[int, ...]:
    """One seq length per query length, in ``[max(q, lo_floor), max(q, hi_cap)]``."""
    hi_base = spec.max_seq_len if hi_cap is None else min(hi_cap, spec.max_seq_len)
    out = []
    for q in query_lens:
        lo = max(q, lo_floor)
        hi = max(lo, hi_base)
        out.append(draw(seq_len_strategy(lo, hi, spec.block_size, chunks)))
    return tuple(out)


def _check_query_lens(spec: CaptureSpec, query_lens: Any) -> tuple[int, ...]:
    try:
        qs = tuple(query_lens)
    except TypeError:
        raise ValueError(f"query_lens must be a sequence of ints (or a strategy for one), got {query_lens!r}") from None
    if not qs:
        raise ValueError("query_lens must hold at least one request")
    for i, q in enumerate(qs):
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= spec.max_query_len:
            raise ValueError(
                f"query_lens[{i}] = {q!r} must be an int in [1, spec.max_query_len={spec.max_query_len}]"
            )
    return qs


def _check_seq_lens(spec: CaptureSpec, seq_lens: Any) -> tuple[int, ...]:
    try:
        ss = tuple(seq_lens)
    except TypeError:
        raise ValueError(f"seq_lens must be a sequence of ints (or a strategy for one), got {seq_lens!r}") from None
    if not ss:
        raise ValueError("seq_lens must hold at least one request")
    for i, s in enumerate(ss):
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= spec.max_seq_len:
            raise ValueError(f"seq_lens[{i}] = {s!r} must be an int in [1, spec.max_seq_len={spec.max_seq_len}]")
    return ss


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
    first = 1 if reserve_null_block else 0
    pool = spec.num_blocks - first
    needs = [math.ceil(s / spec.block_size) for s in seq_lens]
    total = sum(needs)
    if total > pool:
        raise ValueError(
            f"block_tables: the batch needs {total} blocks but spec.num_blocks={spec.num_blocks} "
            f"leaves only {pool} (reserve_null_block={reserve_null_block})"
        )
    swapped: dict[int, int] = {}  # virtual pool: position -> value (default: itself)
    if shuffle and pool > 1:
        starts, acc = [], 0
        for n in needs:
            starts.append(acc)
            acc += n
        for i in _shuffle_positions(starts, total):
            j = draw(_ints(i, pool - 1))
            if j != i:
                vi, vj = swapped.get(i, i), swapped.get(j, j)
                swapped[i], swapped[j] = vj, vi
    flat = [first + swapped.get(i, i) for i in range(total)]
    table, acc = [], 0
    for n in needs:
        table.append(tuple(flat[acc : acc + n]))
        acc += n
    return tuple(table)


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
            seq = _check_count(
                "max_seq_len", _get(draw, max_seq_len), mq, 1 << 30, " (it must be >= max_query_len)"
            )
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
        return CaptureSpec(
            max_reqs=reqs, max_query_len=mq, max_seq_len=seq, block_size=bs, capture_sizes=sizes
        )

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
      ``u <= spec.max_query_len``) for every request; shrinks to ``u = 1``.
    * ``ALWAYS``: each request independently in ``[1, spec.max_query_len]``
      (mixed prefill and decode); shrinks to all 1.
    * ``NEVER``: raises ``ValueError``: nothing may be captured.

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
        k = draw(_ints(0, spec.max_query_len - 1))
        return (1 + k,) * n
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
        uniform = 1 + draw(_ints(0, spec.max_query_len - 1))
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
    if not _is_strategy(support):
        _check_support(support)
    if seed is not None and not _is_strategy(seed):
        _check_seed(seed)
    if not _is_strategy(spec):
        _check_spec(spec)
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


def _check_plain_slots(spec: CaptureSpec, num_reqs: Any, num_slots: Any) -> None:
    if num_slots is not None and not _is_strategy(num_slots):
        _check_count("num_slots", num_slots, 1, spec.max_reqs, " (spec.max_reqs)")
    if num_reqs is not None and not _is_strategy(num_reqs):
        top = spec.max_reqs
        if num_slots is not None and not _is_strategy(num_slots):
            top = num_slots
        _check_count("num_reqs", num_reqs, 1, top, " (num_slots)" if top != spec.max_reqs else " (spec.max_reqs)")


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
    if not _is_strategy(support):
        _check_support(support)
    if seed is not None and not _is_strategy(seed):
        _check_seed(seed)
    if not _is_strategy(spec):
        _check_spec(spec)
        if not _is_strategy(num_slots):
            _check_count("num_slots", num_slots, 1, spec.max_reqs, " (spec.max_reqs)")

    @st.composite
    def _capture(draw: Any) -> Batch:
        sp = _check_spec(_get(draw, spec))
        level = _check_support(_get(draw, support))
        slots = _check_count("num_slots", _get(draw, num_slots), 1, sp.max_reqs, " (spec.max_reqs)")
        seeds = _ints(0, MAX_SEED) if seed is None else seed
        return draw(_batch(sp, level, _ints(1, slots), seeds, num_slots=slots, hi_cap=sp.max_seq_len - 1))

    return _capture()


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
        seeds = _seeds_avoiding(None if cap is None else cap.seed)
        beyond_lo = None
        if beyond and cap is not None and cap.max_seq_len < sp.max_seq_len:
            beyond_lo = cap.max_seq_len + 1

        def step(num_reqs: SearchStrategy[int]) -> SearchStrategy[Batch]:
            return _step(sp, level, num_reqs, seeds, beyond_lo)

        # Sometimes (a drawn boolean, shrinking to False) end the sequence with
        # a forced "larger, then smaller" pair: stale padding from the larger.
        force = top >= 2 and hi_steps >= 2 and draw(st.booleans())
        fresh = step(_ints(1, top))
        items = draw(
            st.lists(
                st.one_of(fresh, st.just(_REPEAT)),
                min_size=max(0 if force else 1, lo_steps - 2 * force),
                max_size=hi_steps - 2 * force,
            )
        )
        out: list[Batch] = []
        for item in items:
            if item is _REPEAT:
                # "the same batch again"; with nothing before it, a fresh one.
                item = out[-1] if out else draw(fresh)
            out.append(item)
        if force:
            big = draw(step(_ints(2, top)))
            out += [big, draw(step(_ints(1, big.num_reqs - 1)))]
        return out

    return _steps()


@st.composite
def _step(
    draw: Any,
    spec: CaptureSpec,
    level: Support,
    num_reqs: SearchStrategy[int],
    seeds: SearchStrategy[int],
    beyond_lo: int | None,
) -> Batch:
    lo_floor = 1
    if beyond_lo is not None and draw(st.booleans()):
        lo_floor = beyond_lo
    return draw(_batch(spec, level, num_reqs, seeds, lo_floor=lo_floor))


_step = functools.lru_cache(maxsize=4096)(_step)


def _check_steps(min_steps: Any, max_steps: Any) -> tuple[int, int]:
    _check_count("min_steps", min_steps, 1, 1 << 16)
    _check_count("max_steps", max_steps, min_steps, 1 << 16, " (it must be >= min_steps)")
    return min_steps, max_steps


def _check_capture(spec: CaptureSpec, cap: Any) -> None:
    if not isinstance(cap, Batch):
        raise ValueError(f"capture_batch must be a graphsafe.Batch (or a strategy for one), got {cap!r}")
    spec.validate_batch(cap)

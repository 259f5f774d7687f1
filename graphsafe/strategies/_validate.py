"""Argument checks and small shared pieces of the strategies (errors are graphsafe's UsageError)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from ..contract import Batch, CaptureSpec, Support
from ..errors import UsageError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

T = TypeVar("T")
MaybeStrategy: TypeAlias = T | SearchStrategy[T]

MAX_SEED = 2**31 - 1


# -- helpers -------------------------------------------------------------------


# Strategies built inside draws are validated by Hypothesis each time they are new objects; the same
# bounds give the same (cached) object, validated once.  This halves the cost of drawing a plan.
_ints = functools.lru_cache(maxsize=4096)(st.integers)


def _get(draw: Any, value: Any) -> Any:
    """Draw ``value`` when it is a strategy, else return it unchanged."""
    return draw(value) if isinstance(value, SearchStrategy) else value


def _is_strategy(value: Any) -> TypeIs[SearchStrategy[Any]]:
    return isinstance(value, SearchStrategy)


def _check_spec(spec: Any) -> CaptureSpec:
    if not isinstance(spec, CaptureSpec):
        raise UsageError(f"spec must be a graphsafe.CaptureSpec (or a strategy for one), got {spec!r}")
    return spec


def _check_support(support: Any) -> Support:
    try:
        level = Support(support)
    except ValueError:
        raise UsageError(f"support must be a graphsafe.Support, got {support!r}") from None
    if level is Support.NEVER:
        raise UsageError(
            "support=Support.NEVER: a backend with Support.NEVER must not be captured at all, "
            "so there is no batch a captured graph may serve; test it eagerly instead"
        )
    return level


def _check_count(name: str, value: Any, lo: int, hi: int, hint: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be an int (or a strategy for one), got {value!r}")
    if not lo <= value <= hi:
        raise UsageError(f"{name} must be in [{lo}, {hi}]{hint}, got {value}")
    return value


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise UsageError(f"seed must be an int in [0, 2**31 - 1] (or a strategy for one), got {seed!r}")
    return seed


def _check_given(spec: Any, support: Any, seed: Any) -> TypeIs[CaptureSpec]:
    """Validate whichever of ``spec``, ``support`` and ``seed`` are plain values (strategies are
    validated when drawn); True when ``spec`` is a plain value."""
    if not _is_strategy(support):
        _check_support(support)
    if seed is not None and not _is_strategy(seed):
        _check_seed(seed)
    if _is_strategy(spec):
        return False
    _check_spec(spec)
    return True


@functools.lru_cache(maxsize=1024)
def _seeds_avoiding(avoid: int | None) -> SearchStrategy[int]:
    """Seeds in ``[0, 2**31 - 1]`` except ``avoid``; shrinks to 0 (to 1 when 0 is avoided)."""
    if avoid is None:
        return _ints(0, MAX_SEED)
    return _ints(0, MAX_SEED - 1).map(lambda s: s + 1 if s >= avoid else s)


def _check_query_lens(spec: CaptureSpec, query_lens: Any) -> tuple[int, ...]:
    try:
        qs = tuple(query_lens)
    except TypeError:
        raise UsageError(f"query_lens must be a sequence of ints (or a strategy for one), got {query_lens!r}") from None
    if not qs:
        raise UsageError("query_lens must hold at least one request")
    for i, q in enumerate(qs):
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= spec.max_query_len:
            raise UsageError(f"query_lens[{i}] = {q!r} must be an int in [1, spec.max_query_len={spec.max_query_len}]")
    return qs


def _check_seq_lens(spec: CaptureSpec, seq_lens: Any) -> tuple[int, ...]:
    try:
        ss = tuple(seq_lens)
    except TypeError:
        raise UsageError(f"seq_lens must be a sequence of ints (or a strategy for one), got {seq_lens!r}") from None
    if not ss:
        raise UsageError("seq_lens must hold at least one request")
    for i, s in enumerate(ss):
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= spec.max_seq_len:
            raise UsageError(f"seq_lens[{i}] = {s!r} must be an int in [1, spec.max_seq_len={spec.max_seq_len}]")
    return ss


def _check_plain_slots(spec: CaptureSpec, num_reqs: Any, num_slots: Any) -> None:
    if num_slots is not None and not _is_strategy(num_slots):
        _check_count("num_slots", num_slots, 1, spec.max_reqs, " (spec.max_reqs)")
    if num_reqs is not None and not _is_strategy(num_reqs):
        top = spec.max_reqs
        if num_slots is not None and not _is_strategy(num_slots):
            top = num_slots
        _check_count("num_reqs", num_reqs, 1, top, " (num_slots)" if top != spec.max_reqs else " (spec.max_reqs)")


def _check_steps(min_steps: Any, max_steps: Any) -> tuple[int, int]:
    _check_count("min_steps", min_steps, 1, 1 << 16)
    _check_count("max_steps", max_steps, min_steps, 1 << 16, " (it must be >= min_steps)")
    return min_steps, max_steps


def _check_capture(spec: CaptureSpec, cap: Any) -> None:
    if not isinstance(cap, Batch):
        raise UsageError(f"capture_batch must be a graphsafe.Batch (or a strategy for one), got {cap!r}")
    spec.validate_batch(cap)

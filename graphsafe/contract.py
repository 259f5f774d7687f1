"""The contract every backend implements: Support, CaptureSpec, Batch and Target.

A *target* wraps one attention backend (or any captured region).  The checker
builds one instance for the CUDA graph and fresh instances for the eager
reference, and drives them through ``setup`` -> (``prepare`` -> replay)* exactly
the way a serving engine does.
"""

from __future__ import annotations

import contextlib
import enum
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch

from .errors import SpecError

__all__ = ["Support", "CaptureSpec", "Batch", "Target", "capturing", "capture_prepare", "CAPTURE_SEED"]

#: the seed of every capture batch; no replayed batch uses it, so replays never see the capture's inputs
CAPTURE_SEED = 2**31 - 1


class Support(enum.IntEnum):
    """Which batches one captured graph may serve.

    Same meaning as the serving engines' ``AttentionCGSupport``:

    * ``NEVER``: the backend must not be captured at all.
    * ``UNIFORM_SINGLE_TOKEN_DECODE``: every request has query length 1.
    * ``UNIFORM_BATCH``: all query lengths are equal (1 + speculative tokens).
    * ``ALWAYS``: any mix of prefill and decode.
    """

    NEVER = 0
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    UNIFORM_BATCH = 2
    ALWAYS = 3

    def allows(self, batch: Batch) -> bool:
        """True when a graph of this level may serve ``batch``."""
        if self is Support.NEVER:
            return False
        if self is Support.UNIFORM_SINGLE_TOKEN_DECODE:
            return all(q == 1 for q in batch.query_lens)
        if self is Support.UNIFORM_BATCH:
            return batch.is_uniform
        return True


def _check_int(owner: str, name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{owner}.{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise SpecError(f"{owner}.{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class CaptureSpec:
    """The sizes a backend is set up and captured for (the engine's config).

    ``num_blocks`` defaults to enough physical KV blocks for every request slot
    at ``max_seq_len`` plus one reserved null block (block 0).

    ``uniform_query_len`` narrows what a ``UNIFORM_BATCH`` graph serves: uniform batches whose query
    length is exactly this (vLLM replays its uniform-decode graphs only at ``1 + num_speculative_tokens``);
    0, the default, means any uniform length up to ``max_query_len``.

    Example::

        spec = CaptureSpec(max_reqs=8, max_query_len=2, max_seq_len=256, block_size=16)
        spec.blocks_per_seq  # 16
    """

    max_reqs: int = 8
    max_query_len: int = 1
    max_seq_len: int = 128
    block_size: int = 16
    num_blocks: int = 0
    capture_sizes: tuple[int, ...] = ()
    uniform_query_len: int = 0

    def __post_init__(self) -> None:
        _check_int("CaptureSpec", "max_reqs", self.max_reqs, 1)
        _check_int("CaptureSpec", "max_query_len", self.max_query_len, 1)
        _check_int("CaptureSpec", "uniform_query_len", self.uniform_query_len, 0)
        if self.uniform_query_len > self.max_query_len:
            raise SpecError(
                f"CaptureSpec.uniform_query_len ({self.uniform_query_len}) must be <= max_query_len "
                f"({self.max_query_len}), or 0 for any uniform length"
            )
        _check_int("CaptureSpec", "max_seq_len", self.max_seq_len, 1)
        _check_int("CaptureSpec", "block_size", self.block_size, 1)
        if self.max_query_len > self.max_seq_len:
            raise SpecError(
                f"CaptureSpec.max_query_len ({self.max_query_len}) must be <= max_seq_len "
                f"({self.max_seq_len}): a query cannot be longer than its sequence"
            )
        needed = self.max_reqs * self.blocks_per_seq + 1
        if isinstance(self.num_blocks, int) and not isinstance(self.num_blocks, bool) and self.num_blocks < 0:
            raise SpecError(
                f"CaptureSpec.num_blocks must be 0 (the default: {needed}) or >= {needed}, got {self.num_blocks}"
            )
        if self.num_blocks == 0:
            object.__setattr__(self, "num_blocks", needed)
        _check_int("CaptureSpec", "num_blocks", self.num_blocks, 1)
        if self.num_blocks < needed:
            raise SpecError(
                f"CaptureSpec.num_blocks ({self.num_blocks}) must be >= max_reqs * "
                f"ceil(max_seq_len / block_size) + 1 = {needed} so that a full batch fits "
                "beside the reserved null block 0; raise num_blocks or leave it 0 for the default"
            )
        sizes = tuple(self.capture_sizes)
        object.__setattr__(self, "capture_sizes", sizes)
        if len(set(sizes)) != len(sizes):
            dup = sorted({s for s in sizes if sizes.count(s) > 1})
            raise SpecError(f"CaptureSpec.capture_sizes lists {dup} more than once; give each size once")
        for s in sizes:
            _check_int("CaptureSpec", "capture_sizes[...]", s, 1)
            if s > self.max_reqs:
                raise SpecError(
                    f"CaptureSpec.capture_sizes contains {s} > max_reqs ({self.max_reqs}); "
                    "a graph cannot hold more request slots than the spec allows"
                )

    def uniform_lengths(self) -> tuple[int, int]:
        """The query lengths, ``(lowest, highest)``, a ``UNIFORM_BATCH`` batch of this spec may have."""
        u = self.uniform_query_len
        return (u, u) if u else (1, self.max_query_len)

    @property
    def blocks_per_seq(self) -> int:
        """Blocks one request at ``max_seq_len`` needs."""
        return math.ceil(self.max_seq_len / self.block_size)

    def to_dict(self) -> dict:
        """Plain JSON-ready data; :meth:`from_dict` reads it back."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CaptureSpec:
        """A spec from :meth:`to_dict`'s data; keys this version does not know are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def default_capture_sizes(self) -> tuple[int, ...]:
        """``capture_sizes`` if given, else 1, 2, 4, ... up to and including ``max_reqs``."""
        if self.capture_sizes:
            return tuple(sorted(set(self.capture_sizes)))
        sizes, s = [], 1
        while s < self.max_reqs:
            sizes.append(s)
            s *= 2
        sizes.append(self.max_reqs)
        return tuple(sorted(set(sizes)))

    def validate_batch(self, batch: Batch) -> None:
        """Raise ``ValueError`` naming the field when ``batch`` does not fit this spec."""
        if batch.num_slots > self.max_reqs:
            raise SpecError(f"Batch.num_slots ({batch.num_slots}) must be <= CaptureSpec.max_reqs ({self.max_reqs})")
        for i, (q, s, row) in enumerate(zip(batch.query_lens, batch.seq_lens, batch.block_table)):
            if q > self.max_query_len:
                raise SpecError(f"Batch.query_lens[{i}] = {q} exceeds CaptureSpec.max_query_len ({self.max_query_len})")
            if s > self.max_seq_len:
                raise SpecError(f"Batch.seq_lens[{i}] = {s} exceeds CaptureSpec.max_seq_len ({self.max_seq_len})")
            need = math.ceil(s / self.block_size)
            if len(row) < need:
                raise SpecError(
                    f"Batch.block_table[{i}] has {len(row)} blocks but seq_lens[{i}] = {s} needs "
                    f"ceil({s} / block_size {self.block_size}) = {need}"
                )
            if len(row) > self.blocks_per_seq:
                raise SpecError(
                    f"Batch.block_table[{i}] has {len(row)} blocks, more than "
                    f"ceil(max_seq_len / block_size) = {self.blocks_per_seq}"
                )
            for b in row:
                if not 0 <= b < self.num_blocks:
                    raise SpecError(
                        f"Batch.block_table[{i}] holds block {b}, outside [0, num_blocks={self.num_blocks})"
                    )

    def worst_case_batch(self, num_slots: int, *, query_len: int | None = None, seed: int = 0) -> Batch:
        """Every slot at ``query_len`` (default ``max_query_len``) and ``max_seq_len``.

        This is the batch serving engines capture with.  Blocks are assigned
        ``1, 2, 3, ...`` (block 0 is the reserved null block).
        """
        q = self.max_query_len if query_len is None else query_len
        bps = self.blocks_per_seq
        table = tuple(tuple(range(1 + i * bps, 1 + (i + 1) * bps)) for i in range(num_slots))
        return Batch(
            query_lens=(q,) * num_slots,
            seq_lens=(self.max_seq_len,) * num_slots,
            block_table=table,
            seed=seed,
        )


@dataclass(frozen=True)
class Batch:
    """One step's requests, as the scheduler hands them to the backend.

    ``num_slots`` is how many request slots this step fills in the captured
    graph; slots past ``num_reqs`` are padding (query length 0, seq length 0,
    no blocks) that the target's ``prepare`` must make harmless.

    Example::

        b = Batch(query_lens=(1, 1), seq_lens=(5, 17), block_table=((3,), (7, 2)), seed=1)
        b.cu_query_lens      # (0, 1, 2)
        b.padded(4).num_slots  # 4
    """

    query_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    block_table: tuple[tuple[int, ...], ...]
    seed: int = 0
    num_slots: int = 0

    def __post_init__(self) -> None:
        for name in ("query_lens", "seq_lens"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)):
                raise SpecError(f"Batch.{name} must be a tuple of ints, got {type(value).__name__}")
            object.__setattr__(self, name, tuple(value))
        if not isinstance(self.block_table, (tuple, list)):
            raise SpecError(
                f"Batch.block_table must be a tuple of per-request block-id tuples, got {type(self.block_table).__name__}"
            )
        object.__setattr__(self, "block_table", tuple(tuple(row) for row in self.block_table))
        n = len(self.query_lens)
        if n == 0:
            raise SpecError("Batch.query_lens must hold at least one request")
        if len(self.seq_lens) != n:
            raise SpecError(
                f"Batch.seq_lens has {len(self.seq_lens)} entries but query_lens has {n}; give one per request"
            )
        if len(self.block_table) != n:
            raise SpecError(
                f"Batch.block_table has {len(self.block_table)} rows but query_lens has {n}; give one row per request"
            )
        for i, (q, s) in enumerate(zip(self.query_lens, self.seq_lens)):
            _check_int("Batch", f"query_lens[{i}]", q, 1)
            _check_int("Batch", f"seq_lens[{i}]", s, 1)
            if s < q:
                raise SpecError(
                    f"Batch.seq_lens[{i}] = {s} must be >= query_lens[{i}] = {q}: the sequence includes the query"
                )
        seen: dict[int, int] = {}
        for i, row in enumerate(self.block_table):
            for b in row:
                _check_int("Batch", f"block_table[{i}][...]", b, 0)
                if b in seen:
                    raise SpecError(
                        f"Batch.block_table: block {b} is used by request {seen[b]} and request {i}; "
                        "physical blocks must be distinct across requests"
                    )
                seen[b] = i
        _check_int("Batch", "seed", self.seed, 0)
        if self.num_slots == 0:
            object.__setattr__(self, "num_slots", n)
        _check_int("Batch", "num_slots", self.num_slots, 1)
        if self.num_slots < n:
            raise SpecError(f"Batch.num_slots ({self.num_slots}) must be >= num_reqs ({n})")

    # -- derived -----------------------------------------------------------------
    @property
    def num_reqs(self) -> int:
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens)

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens)

    @property
    def cu_query_lens(self) -> tuple[int, ...]:
        out, acc = [0], 0
        for q in self.query_lens:
            acc += q
            out.append(acc)
        return tuple(out)

    @property
    def is_uniform(self) -> bool:
        return len(set(self.query_lens)) == 1

    @property
    def is_padded(self) -> bool:
        return self.num_slots > self.num_reqs

    def padded(self, num_slots: int) -> Batch:
        """The same requests in a graph of ``num_slots`` slots."""
        return Batch(self.query_lens, self.seq_lens, self.block_table, self.seed, num_slots)

    def unpadded(self) -> Batch:
        return self.padded(self.num_reqs)

    def token_owner(self, row: int) -> tuple[int, int]:
        """Map a packed token row to ``(request, token index within the request)``."""
        cu = self.cu_query_lens
        for r in range(self.num_reqs):
            if row < cu[r + 1]:
                return r, row - cu[r]
        return -1, row - cu[-1]

    def short(self) -> str:
        """A compact one-line form used in messages and reports."""
        pad = f", num_slots={self.num_slots}" if self.is_padded else ""
        return f"Batch(q={list(self.query_lens)}, seq={list(self.seq_lens)}{pad}, seed={self.seed})"

    def to_dict(self) -> dict:
        return {
            "query_lens": list(self.query_lens),
            "seq_lens": list(self.seq_lens),
            "block_table": [list(r) for r in self.block_table],
            "seed": self.seed,
            "num_slots": self.num_slots,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Batch:
        return cls(
            query_lens=tuple(d["query_lens"]),
            seq_lens=tuple(d["seq_lens"]),
            block_table=tuple(tuple(r) for r in d["block_table"]),
            seed=int(d.get("seed", 0)),
            num_slots=int(d.get("num_slots", 0)),
        )


_state = threading.local()


def capturing() -> bool:
    """True while graphsafe (or anyone) is capturing a graph on this thread.

    Works for real CUDA graphs (``torch.cuda.is_current_stream_capturing``) and
    for the CPU emulator.  A backend that keeps separate warm-up and captured
    state (the fix for lazy-init bugs) branches on this.
    """
    if getattr(_state, "emulated_capture", False):
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@contextlib.contextmanager
def emulated_capture() -> Iterator[None]:
    """Make :func:`capturing` true on this thread (the CPU emulator's capture)."""
    prev = getattr(_state, "emulated_capture", False)
    _state.emulated_capture = True
    try:
        yield
    finally:
        _state.emulated_capture = prev


def capture_prepare(target: Any) -> Any:
    """The method that prepares a capture batch on ``target``: its ``prepare_capture`` (a
    :class:`Target`'s default is ``prepare``), or ``prepare`` for a class that does not subclass Target."""
    return getattr(target, "prepare_capture", None) or target.prepare


class Target:
    """Base class for a backend under test.

    Subclasses set ``support`` and implement ``setup``, ``prepare`` and
    ``forward``.  The checker constructs instances with no arguments.

    * ``setup(spec, device)``: allocate weights, caches and *persistent* buffers.
    * ``prepare(batch)``: per-step host work, outside the graph.  It must leave
      everything ``forward`` reads in buffers that existed at capture.
    * ``prepare_capture(batch)``: the same for a batch about to be captured (default: ``prepare``).
    * ``forward()``: the captured region; returns a tensor or tuple of tensors.
    * ``static()``: tensors whose contents persist across steps by design
      (weights, KV cache, recurrent state); compared after every step.
    * ``live(outputs, batch)``: the output rows that belong to live requests; ``outputs`` is exactly
      what ``forward()`` returned (a tensor or a tuple), and the result has the same structure.
    * ``support``: which batches one graph may serve; set it (a target without it is checked at the
      lowest level, ``UNIFORM_SINGLE_TOKEN_DECODE``, with a warning).

    ``prepare()`` and ``forward()`` must be idempotent for one batch: graphsafe may call ``prepare()``
    again on the same batch to learn what it writes.

    Example::

        class Scale(graphsafe.Target):
            support = graphsafe.Support.ALWAYS

            def setup(self, spec, device):
                self.x = torch.zeros(spec.max_reqs * spec.max_query_len, 8, device=device)
                self.out = torch.zeros_like(self.x)

            def prepare(self, batch):
                n = batch.num_tokens
                self.x[:n].copy_(graphsafe.seeded((n, 8), seed=batch.seed, device=self.x.device))
                self.x[n:].zero_()

            def forward(self):
                torch.mul(self.x, 2.0, out=self.out)
                return self.out
    """

    support: ClassVar[Support] = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec: ClassVar[CaptureSpec | None] = None

    def setup(self, spec: CaptureSpec, device: torch.device) -> None:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__}.setup(spec, device) is not implemented")

    def prepare(self, batch: Batch) -> None:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__}.prepare(batch) is not implemented")

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, ...]:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__}.forward() is not implemented")

    def prepare_capture(self, batch: Batch) -> None:
        """``prepare()`` for a batch about to be captured (its warm-up, pre-screen and capture follow);
        by default ``prepare(batch)``.  Engines that build capture metadata their own way override it (vLLM's
        runner calls ``build_for_cudagraph_capture()`` with ``max_seq_len = max_model_len``)."""
        self.prepare(batch)

    def static(self) -> Mapping[str, torch.Tensor] | Sequence[torch.Tensor]:
        return {}

    def live(
        self, outputs: torch.Tensor | tuple[torch.Tensor, ...], batch: Batch
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The rows of ``outputs`` (exactly what ``forward()`` returned: a tensor or a tuple) that belong
        to live requests, in the same structure; default: the first ``batch.num_tokens`` rows of each."""
        if isinstance(outputs, torch.Tensor):
            return outputs[: batch.num_tokens]
        return tuple(o[: batch.num_tokens] for o in outputs)

"""How an engine captures: which batch fills each graph at capture, and in which order sizes are captured.

Serving engines differ, and a backend can be safe under one and broken under another:

* ``worst``: every slot at the longest query and sequence (vLLM's MLA backends), sizes largest first;
* ``ascending``: the same batches, sizes smallest first (some engines): a workspace a larger capture
  re-allocates drops what the smaller graph baked in;
* ``minimal``: dummy batches, every slot at query length 1 (the uniform decode length for
  ``UNIFORM_BATCH``) and the shortest sequence (vLLM's Triton backend builds its capture metadata so);
* ``drawn``: batches drawn by Hypothesis, a fresh capture for each example (real traffic);
* a function ``size -> Batch``: the engine's own capture batch.

A check explores ``worst``, ``ascending``, ``minimal`` and ``drawn`` by default (``explore``).

Example::

    graphsafe.check(MyBackend, capture="minimal")
    graphsafe.check(MyBackend, capture=lambda size: my_engine_dummy_batch(size))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..contract import CAPTURE_SEED, Batch, CaptureSpec, Support
from ..errors import ContractError, UsageError

__all__ = ["CapturePolicy", "POLICIES", "EXPLORE", "resolve_capture", "capture_query_len"]


def capture_query_len(support: Support, spec: CaptureSpec) -> int:
    """The query length of the worst-case capture batch at ``support`` (a ``UNIFORM_BATCH`` graph's: the
    spec's ``uniform_query_len`` when it sets one)."""
    if support == Support.UNIFORM_SINGLE_TOKEN_DECODE:
        return 1
    return spec.uniform_lengths()[1] if support == Support.UNIFORM_BATCH else spec.max_query_len


def _worst(spec: CaptureSpec, support: Support, size: int) -> Batch:
    return spec.worst_case_batch(size, query_len=capture_query_len(support, spec), seed=CAPTURE_SEED)


def _minimal(spec: CaptureSpec, support: Support, size: int) -> Batch:
    q = capture_query_len(support, spec) if support == Support.UNIFORM_BATCH else 1
    blocks = -(-q // spec.block_size)
    table = tuple(tuple(range(1 + i * blocks, 1 + (i + 1) * blocks)) for i in range(size))
    return Batch(query_lens=(q,) * size, seq_lens=(q,) * size, block_table=table, seed=CAPTURE_SEED)


@dataclass(frozen=True)
class CapturePolicy:
    """A named capture batch per size (None: drawn per example) and the order sizes are captured in."""

    name: str
    batch: Callable[[CaptureSpec, Support, int], Batch] | None
    ascending: bool = False
    describe: str = ""

    def batch_for(self, spec: CaptureSpec, support: Support, size: int) -> Batch:
        """This policy's capture batch for a graph of ``size`` slots, checked against ``spec``."""
        assert self.batch is not None, f"the {self.name} policy draws its capture batch per example"
        batch = self.batch(spec, support, size)
        if not isinstance(batch, Batch):
            raise ContractError(
                f"capture function returned {type(batch).__name__} for size {size}; return a graphsafe.Batch"
            )
        batch = batch.padded(size) if batch.num_slots < size else batch
        if batch.num_slots != size:
            raise ContractError(f"capture function returned a batch of {batch.num_slots} slots for size {size}")
        spec.validate_batch(batch)
        return batch


POLICIES: dict[str, CapturePolicy] = {
    "worst": CapturePolicy(
        "worst", _worst, describe="worst-case batches (every slot at the longest lengths), sizes largest first"
    ),
    "ascending": CapturePolicy(
        "ascending", _worst, ascending=True, describe="worst-case batches, sizes smallest first"
    ),
    "minimal": CapturePolicy(
        "minimal",
        _minimal,
        describe="minimal dummy batches (query length 1, the shortest sequences), sizes largest first",
    ),
    "drawn": CapturePolicy("drawn", None, describe="batches drawn for each example, one graph each"),
}

#: what a check explores by default
EXPLORE = ("worst", "ascending", "minimal", "drawn")


def resolve_capture(value: Any) -> tuple[CapturePolicy, ...]:
    """Policies for ``capture=``: ``"explore"`` (default), a name, names, or a function ``size -> Batch``."""
    if value is None or value == "explore":
        return tuple(POLICIES[n] for n in EXPLORE)
    if callable(value) and not isinstance(value, str):
        name = getattr(value, "__qualname__", "custom")
        return (
            CapturePolicy(
                f"custom:{name}", lambda spec, support, size: value(size), describe=f"the batches {name}(size) returns"
            ),
        )
    names: Sequence[str] = [value] if isinstance(value, str) else list(value)
    out: list[CapturePolicy] = []
    for n in names:
        if n == "explore":
            out.extend(POLICIES[m] for m in EXPLORE if POLICIES[m] not in out)
        elif n not in POLICIES:
            raise UsageError(
                f"unknown capture policy {n!r}; choose explore, {', '.join(POLICIES)}, or pass a function size -> Batch"
            )
        elif POLICIES[n] not in out:
            out.append(POLICIES[n])
    if not out:
        raise UsageError("capture: name at least one capture policy")
    return tuple(out)

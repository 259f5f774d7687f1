"""What probes look at: one capture (:class:`CaptureContext`) or one step (:class:`StepContext`).

Every probe is ``run(ctx) -> Finding | None`` over one of these.  A step context grows as the
step runs: after ``prepare`` it knows the session, graph and batches; after the comparison it
also holds both sides' live outputs and static state and the mismatches, and its ``evidence``
(:class:`graphsafe.diagnosis.evidence.Evidence`) computes, on first use, what diagnosis probes share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..contract import Batch, Target
from ..engines.recording import Launch
from ..errors import ContractError

__all__ = ["CaptureInfo", "CaptureContext", "LearnedWrites", "live_rows"]


def live_rows(target: Target, outputs: torch.Tensor | tuple[torch.Tensor, ...], batch: Batch) -> list[torch.Tensor]:
    """``target.live(outputs, batch)`` (``outputs`` as forward() returned them), checked; as a list."""
    live_fn = getattr(target, "live", None) or Target.live.__get__(target)  # a duck-typed target: the default
    live = live_fn(outputs, batch)
    if isinstance(live, torch.Tensor):
        live = (live,)
    if not isinstance(live, tuple) or not all(isinstance(t, torch.Tensor) for t in live):
        raise ContractError(
            f"{type(target).__name__}.live() must return a tensor or a tuple of tensors (the "
            f"structure forward() returned), got {type(live).__name__}"
        )
    for t in live:
        if t.dim() == 0 or t.shape[0] != batch.num_tokens and type(target).live is Target.live:
            raise ContractError(
                f"{type(target).__name__}.live() returned a tensor of shape {tuple(t.shape)}; rows must be the "
                f"batch's {batch.num_tokens} live tokens (override live() if your outputs are laid out differently)"
            )
    return list(live)


@dataclass
class CaptureInfo:
    """What happened around one capture: the batch, and who wrote which buffer."""

    size: int
    batch: Batch
    prepare_written: set[int]  # storages the capture-time prepare created or changed
    warmup_written: set[int]  # storages that changed during warm-up
    graph_written: set[int]  # storages some captured launch writes
    paths: dict[int, list[str]]  # storage -> attribute paths at capture
    launches: list[Launch]
    warmup_launches: list[Launch] = field(default_factory=list)
    warmup_kernel_writes: set = field(default_factory=set)  # (kernel, argument) pairs written in warm-up
    graph_map: Any = None  # the graph's nodes mapped onto the target (graph_map.GraphMap), when the reader ran


@dataclass
class LearnedWrites:
    """What warm-ups learned of the kernels graphsafe sees only as calls (Triton, opaque): the (kernel,
    argument) pairs seen written, and every kernel whose launches were examined (a kernel with no pair
    wrote nothing seen, and counts as writing every argument).  Learning clones and compares every
    argument of a launch, so later warm-ups (other sizes, later sessions, drawn captures) skip these
    kernels."""

    pairs: set = field(default_factory=set)
    kernels: set = field(default_factory=set)

    def copy(self) -> LearnedWrites:
        return LearnedWrites(set(self.pairs), set(self.kernels))


@dataclass
class CaptureContext:
    """A capture that failed: the size and batch it was captured with, and what it raised."""

    session: Any  # the CaptureSession (which imports this module)
    size: int
    batch: Batch
    error: BaseException

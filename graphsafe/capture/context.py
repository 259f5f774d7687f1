"""What probes look at: one capture (:class:`CaptureContext`) or one step (:class:`StepContext`).

Every probe is ``run(ctx) -> Finding | None`` over one of these.  A step context grows as the
step runs: after ``prepare`` it knows the session, graph and batches; after the comparison it
also holds both sides' live outputs and static state and the mismatches, and its ``evidence``
(:class:`graphsafe.capture.evidence.Evidence`) computes, on first use, what diagnosis probes share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..contract import Batch, CaptureSpec, Target
from ..engines import Engine, Graph
from ..engines.recording import Launch
from ..errors import ContractError
from ..findings import Mismatch
from .compare import Comparator, identical
from .ledger import float_bytes, poison_bytes

__all__ = ["CaptureInfo", "CaptureContext", "StepContext", "live_rows"]


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


@dataclass
class StepContext:
    """One step of one example, on one captured graph."""

    target_cls: type
    target_name: str
    spec: CaptureSpec
    engine: Engine
    session: Any  # the CaptureSession (which imports this module)
    graph: Graph
    info: CaptureInfo
    history: list[Batch]  # unpadded steps up to and including this one
    padded: list[Batch]
    seed: int
    comparator: Comparator
    region: torch.Tensor | None = None  # blocks this example can touch in paged caches (Comparator.region)
    replayed: list[torch.Tensor] | None = None  # live rows of this step's replay, when a step probe ran it
    graph_live: list[torch.Tensor] = field(default_factory=list)
    eager_live: list[torch.Tensor] = field(default_factory=list)
    graph_static: dict[str, torch.Tensor] = field(default_factory=dict)
    eager_static: dict[str, torch.Tensor] = field(default_factory=dict)
    mismatches: list[Mismatch] = field(default_factory=list)
    evidence: Any = None  # an Evidence (graphsafe.capture.evidence), set when the step is diagnosed

    @property
    def batch(self) -> Batch:
        """This step's batch, unpadded."""
        return self.history[-1]

    @property
    def padded_batch(self) -> Batch:
        """This step's batch as the graph sees it (padded to the captured size)."""
        return self.padded[-1]

    @property
    def step_index(self) -> int:
        return len(self.history) - 1

    def _output_bytes(self) -> list[torch.Tensor]:
        """Byte views of the graph's floating outputs, made at its first replay and kept on the graph:
        outputs are the graph's own memory, alive as long as it is."""
        if self.graph.poison_views is None:
            self.graph.poison_views = float_bytes(self.graph.outputs)
        return self.graph.poison_views

    def replay_twice(self, between: Any) -> tuple[list[torch.Tensor], list[Mismatch]]:
        """Replay this step's prepared batch twice, ``between.restore()`` (a ``SavedStatics`` of the static state
        the first replay starts from) run in between: the second replay's live rows, and where the two differ
        bitwise (``[]`` when they agree, the usual answer, found for a fraction of the comparison's cost)."""
        first = self.replay_live(wait=False)  # only the graph instance's own work runs before the second, waited for
        between.restore()
        second = self.replay_live()
        return second, [] if identical(first, second) else self.comparator.outputs(
            first, second, self.batch, bitwise=True
        )

    def replay_live(self, fill: Any = None, *, wait: bool = True) -> list[torch.Tensor]:
        """Replay the graph over this step's prepared buffers (outputs NaN-filled first, or ``fill``)
        and return copies of its live rows.  ``wait=False`` returns without waiting for the device (the
        copies are ordered after the replay on its stream): for a replay followed by another of the same
        graph, with only the graph instance's own device work between; the later one's wait (the engine's
        ``synchronize()``) is when both count as finished."""
        outs = self.graph.outputs
        if fill is None:
            poison_bytes(self._output_bytes())
        else:
            for t in outs:
                t.fill_(fill if t.dtype.is_floating_point else int(fill))
        self.graph.replay()
        if wait:
            self.engine.synchronize()
        return [t.clone() for t in live_rows(self.session.target, self.graph.returned, self.padded_batch)]

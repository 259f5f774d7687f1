"""One step of one example, as diagnosis probes see it (:class:`StepContext`).

Every probe is ``run(ctx) -> Finding | None`` over one of these (capture probes over a
:class:`~graphsafe.capture.context.CaptureContext`).  A step context grows as the step runs: after
``prepare`` it knows the session, graph and batches; after the comparison it also holds both sides' live
outputs and static state and the mismatches, and its ``evidence``
(:class:`graphsafe.diagnosis.evidence.Evidence`) computes, on first use, what diagnosis probes share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from ..capture.compare import Comparator, identical
from ..capture.context import CaptureInfo, live_rows
from ..capture.ledger import float_bytes, poison_bytes
from ..contract import Batch, CaptureSpec
from ..engines import Engine, Graph
from ..errors import InternalError
from ..findings import Mismatch

__all__ = ["StepContext", "Symptom"]


@dataclass(frozen=True)
class Symptom:
    """What a search shrinks on, not yet diagnosed: a step whose replay differed from eager (``of="eager"``; ``key``
    is the first tensor that differed, an output or a static tensor), or two replays of one prepared batch that
    differed (``of="replays"``, seen by the nondeterministic-replay probe).  The example's finding is decided once,
    on the example that is left when shrinking ends (``ExampleRunner.run`` with ``diagnose=True``)."""

    key: str
    mismatches: tuple[Mismatch, ...]
    step: int
    of: Literal["eager", "replays"] = "eager"


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
    evidence: Any = None  # an Evidence (graphsafe.diagnosis.evidence), set when the step is diagnosed
    before_replay: Any = None  # a PreReplay (graphsafe.diagnosis.repair), saved by a run that diagnoses
    #: this step's replay faulted or never ended in another process: nothing may replay the graph here
    unreplayable: bool = False
    #: asked by a step probe that saw a :class:`Symptom` (set as ``symptom``): explain it now?  False while a
    #: search shrinks (the example that is left is explained once), or for a symptom the check dismissed
    wants_diagnosis: Callable[[Symptom], bool] = lambda _symptom: True
    symptom: Symptom | None = None  # what a step probe saw at this step (the runner takes it)

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
        if self.unreplayable:
            raise InternalError(
                "graphsafe bug: a diagnosis replayed the graph of a step whose replay faults or never ends; only "
                "probes registered without_replay may run there"
            )
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

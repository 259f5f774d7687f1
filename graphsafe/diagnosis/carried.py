"""Buffers a graph carries from one replay into the next: it writes them, and a replay reads what the one
before left there (an accumulator or a work counter nothing in the graph resets).  Found by replaying over
filled buffers (:func:`carried_inputs`), for the probes that explain differing replays or unwritten reads."""

from __future__ import annotations

import weakref

import torch

from ..capture.ledger import fill_other, fill_zero, storages_of
from ..capture.statewalk import byte_view
from ..capture.statics import SavedStatics, static_dict
from ..engines.recording import Recorder
from .context import StepContext

__all__ = ["carried_inputs", "written_inputs"]


#: per graph (its recording), what :func:`carried_inputs` found for each buffer (read before written; left other
#: than zero by a replay from zeros): a property of the graph, so the examples and shrinks that fail on one graph
#: ask once
_CARRIED: weakref.WeakKeyDictionary[Recorder, dict[int, tuple[bool, bool]]] = weakref.WeakKeyDictionary()


def written_inputs(ctx: StepContext) -> list[int]:
    """The buffers the graph writes that are neither static nor freed: the candidates for :func:`carried_inputs`."""
    ext, info = ctx.graph.recording.external, ctx.info
    return [k for k, b in ext.items() if k in info.graph_written and k not in ctx.session.static_keys and b.alive()]


def carried_inputs(ctx: StepContext, keys: list[int], *, accumulating: bool = False) -> list[int]:
    """Of ``keys`` (buffers the graph writes), those a replay also reads before writing: its live outputs
    change with what the buffer held before it.  Replayed once with every candidate zeroed, then once per
    candidate with it alone filled otherwise (:func:`fill_other`), static state restored each time.  A
    workspace the graph fills before reading is not one; an accumulator or a work counter that nothing in
    the graph resets is.  ``accumulating``: only those the replay from zeros also leaves other than zero (an
    accumulator holds what it added; a work counter whose kernel hands it back as it found it, its last program
    resetting it, carries nothing into the next replay).  A graph whose two replays over the same fills differ
    races (two writes to one place in one launch), and then no buffer is named; so does one whose fill's effect
    does not repeat (filled once more, or zeroed once more, the replay gives something else: a race that was quiet
    in the first pair).  Remembered per graph."""
    if ctx.unreplayable:  # a replay would fault or never end: nothing can be shown carried
        return []
    known = _CARRIED.setdefault(ctx.graph.recording, {})
    g = ctx.session.target
    tensors = {k: t for k, t in storages_of(g, ctx.session.static_keys).items() if k in keys and k not in known}
    if tensors:
        saved = SavedStatics(static_dict(g), ctx.seed, ctx.region, ctx.comparator.paged)
        before = {k: byte_view(t).clone() for k, t in tensors.items()}

        def replay(key: int | None) -> list[torch.Tensor]:
            saved.restore()
            for k, t in tensors.items():
                fill_other(t) if k == key else fill_zero(t)
            return ctx.replay_live()

        def differ(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
            return bool(ctx.comparator.outputs(a, b, ctx.batch, bitwise=True))

        try:
            base = replay(None)
            changed = {k: bool(byte_view(t).any()) for k, t in tensors.items()}  # what the replay from zeros left
            if differ(base, replay(None)):
                return []  # the graph differs from itself over the same fills (a race): no buffer is to blame
            found: dict[int, tuple[bool, bool]] = {}
            for k in tensors:
                filled = replay(k)
                moved = differ(base, filled)
                if moved and (differ(filled, replay(k)) or differ(base, replay(None))):
                    # the fill's effect did not repeat, or the zero fill's did not: a race that was quiet in the
                    # first pair of replays, not a buffer carried from one replay into the next
                    return []
                found[k] = (moved, changed[k])
            known.update(found)
        finally:
            saved.restore()
            for k, t in tensors.items():
                byte_view(t).copy_(before[k])
    return [k for k in keys if k in known and known[k][0] and (known[k][1] or not accumulating)]

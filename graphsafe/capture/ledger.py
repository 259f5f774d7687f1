"""The write ledger: which buffers changed during warm-up, prepare and replay.

Content-based (Triton writes bump no version counter): byte snapshots of
storages, compared after the phase.  ``prepare_writes`` runs a step's prepare
twice over buffers filled with two different values, so that writing the value
a buffer already held still counts as a write, for every dtype.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from .statewalk import byte_view, storage_key, typed_view, walk

__all__ = ["Snapshot", "storages_of", "prepare_writes", "poison_floats"]


def storages_of(root: Any, exclude: set[int]) -> dict[int, torch.Tensor]:
    """storage key -> one tensor on it, for every tensor reachable from ``root``."""
    out: dict[int, torch.Tensor] = {}
    for _, t in walk(root):
        if t.untyped_storage().nbytes() == 0:
            continue
        k = storage_key(t)
        if k not in exclude and k not in out:
            out[k] = t
    return out


class Snapshot:
    """Byte copies of a set of storages."""

    def __init__(self, tensors: dict[int, torch.Tensor], hold: bool = True):
        self.tensors = dict(tensors) if hold else {}
        self.bytes = {k: byte_view(t).clone() for k, t in tensors.items()}

    def restore_into(self, current: dict[int, torch.Tensor]) -> None:
        """Restore the storages that still exist (looked up in ``current``)."""
        for k, b in self.bytes.items():
            t = current.get(k)
            if t is not None and t.untyped_storage().nbytes() == b.numel():
                byte_view(t).copy_(b)

    def changed(self) -> set[int]:
        out = set()
        for k, t in self.tensors.items():
            if not torch.equal(byte_view(t), self.bytes[k]):
                out.add(k)
        return out

    def restore(self, keys: Iterable[int] | None = None) -> None:
        for k in self.bytes if keys is None else keys:
            byte_view(self.tensors[k]).copy_(self.bytes[k])


def poison_floats(tensors: Iterable[torch.Tensor]) -> None:
    """Fill floating tensors with NaN (the NaN stands for 'nobody wrote this')."""
    for t in tensors:
        if t.dtype.is_floating_point:
            byte_view(t).fill_(0xFF)  # all-ones bits are NaN for fp32/fp16/bf16/fp8-e4m3fn


def _fill_other(t: torch.Tensor) -> None:
    """The second fill: NaN bytes for floats, 1 for every other dtype (a valid index, unlike -1)."""
    if t.dtype.is_floating_point:
        byte_view(t).fill_(0xFF)
    else:
        typed_view(t).fill_(1)


def prepare_writes(tensors: dict[int, torch.Tensor], run_prepare: Callable[[], Any]) -> set[int]:
    """Storages among ``tensors`` that ``run_prepare`` (a prepare, or a replay) writes, whatever values it writes.

    Runs it twice, over buffers filled with zeros and then with a second value (NaN for
    floats, 1 otherwise): a written value cannot equal both fills, so any write shows in one run.
    The buffers are restored afterwards.
    """
    snap = Snapshot(tensors)
    written: set[int] = set()
    try:
        for fill in (lambda t: byte_view(t).zero_(), _fill_other):
            for t in tensors.values():
                fill(t)
            ref = {k: byte_view(t).clone() for k, t in tensors.items()}
            run_prepare()
            written |= {k for k, t in tensors.items() if not torch.equal(byte_view(t), ref[k])}
            snap.restore()
    finally:
        snap.restore()
    return written

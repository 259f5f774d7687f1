"""The write ledger: which buffers changed during warm-up, prepare and replay.

Content-based (Triton writes bump no version counter): byte snapshots of
storages, compared after the phase.  ``prepare_writes`` runs a step's prepare
twice over buffers filled with two different values, so that writing the value
a buffer already held still counts as a write, for every dtype.

``prepare_calls`` asks more: which elements each call writes and with what, for a
``prepare`` that is not the same from one call to the next (double buffering
writes one copy on odd calls and the other on even ones).  It runs four calls and
keeps the calls of each parity apart (:class:`PrepareLedger`), so a buffer written
only on alternate calls is not hidden by the union of all calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import gpu_verdict
from .statewalk import byte_view, tensors, typed_view

__all__ = [
    "Snapshot",
    "storages_of",
    "differ",
    "prepare_writes",
    "poison_floats",
    "float_bytes",
    "poison_bytes",
    "Writes",
    "PrepareLedger",
    "prepare_calls",
    "fill_zero",
    "fill_other",
]


def storages_of(root: Any, exclude: set[int]) -> dict[int, torch.Tensor]:
    """storage key -> one tensor on it, for every tensor reachable from ``root``."""
    out: dict[int, torch.Tensor] = {}
    for t in tensors(root):
        s = t.untyped_storage()
        if s.nbytes() == 0:
            continue
        k = s.data_ptr()  # storage_key(t), the storage asked for once
        if k not in exclude and k not in out:
            out[k] = t
    return out


class Snapshot:
    """Byte copies of a set of storages."""

    def __init__(self, tensors: dict[int, torch.Tensor], hold: bool = True):
        self.tensors = dict(tensors) if hold else {}
        self.bytes = {k: byte_view(t).clone() for k, t in tensors.items()}

    def restore_into(self, current: dict[int, torch.Tensor]) -> None:
        """Restore the storages that still exist (looked up in ``current``), in one ``_foreach_copy_``
        (one launch on a GPU, not one per storage)."""
        dst, src = [], []
        for k, b in self.bytes.items():
            t = current.get(k)
            if t is not None and t.untyped_storage().nbytes() == b.numel():
                dst.append(byte_view(t))
                src.append(b)
        if dst:
            torch._foreach_copy_(dst, src)

    def changed(self) -> set[int]:
        """The held storages whose bytes differ from the snapshot's."""
        return differ(self.tensors, self.bytes)

    def restore(self, keys: Iterable[int] | None = None) -> None:
        for k in self.bytes if keys is None else keys:
            byte_view(self.tensors[k]).copy_(self.bytes[k])


def differ(tensors: dict[int, torch.Tensor], ref: dict[int, torch.Tensor]) -> set[int]:
    """The keys of ``tensors`` whose storage's bytes differ from ``ref[key]`` (byte copies): in length or in
    any byte.  On a GPU the verdict kernel counts the pairs of equal length, read at once, not one
    ``torch.equal`` (one synchronisation) per storage."""
    out: set[int] = set()
    fast: list[tuple[int, torch.Tensor, torch.Tensor]] = []
    for k, t in tensors.items():
        a, b = byte_view(t), ref[k]
        if a.shape != b.shape:
            out.add(k)
        elif gpu_verdict.usable(a, b):
            fast.append((k, a, b))
        elif not torch.equal(a, b):
            out.add(k)
    if fast:
        counts = gpu_verdict.count_bad([(a, b, 0.0, 0.0, True) for _, a, b in fast]).tolist()
        out |= {k for (k, _, _), c in zip(fast, counts) if c}
    return out


def poison_floats(tensors: Iterable[torch.Tensor]) -> None:
    """Fill floating tensors with NaN (the NaN stands for 'nobody wrote this'): all-ones bytes, NaN for
    fp32/fp16/bf16/fp8-e4m3fn, set by one ``_foreach_clamp_min_`` over their bytes (one launch on a GPU,
    not one per tensor)."""
    poison_bytes(float_bytes(tensors))


def float_bytes(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """The whole storages of the floating tensors among ``tensors`` as byte views, for :func:`poison_bytes`
    (a caller poisoning the same buffers again and again makes them once: two ops a view on a GPU)."""
    return [byte_view(t) for t in tensors if t.dtype.is_floating_point]


def poison_bytes(views: list[torch.Tensor]) -> None:
    """:func:`poison_floats` over byte views made by :func:`float_bytes`."""
    if views:
        torch._foreach_clamp_min_(views, 255)


def fill_zero(t: torch.Tensor) -> None:
    """The first fill: zero bytes, whatever the dtype."""
    byte_view(t).zero_()


def fill_other(t: torch.Tensor) -> None:
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
        for fill in (fill_zero, fill_other):
            for t in tensors.values():
                fill(t)
            ref = {k: byte_view(t).clone() for k, t in tensors.items()}
            run_prepare()
            written |= differ(tensors, ref)
            snap.restore()
    finally:
        snap.restore()
    return written


def _elements(t: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
    """``raw`` (a storage's bytes) as rows of one element of ``t``'s dtype (bytes when they do not divide)."""
    es = t.element_size()
    return raw.view(-1, es) if raw.numel() % es == 0 else raw.view(-1, 1)


@dataclass
class Writes:
    """What some calls of ``prepare`` write, per storage: which bytes (whole elements of the
    storage's dtype) and the bytes they leave there.  Only storages with a write are listed."""

    mask: dict[int, torch.Tensor] = field(default_factory=dict)  # key -> bool per byte
    value: dict[int, torch.Tensor] = field(default_factory=dict)  # key -> the storage's bytes (valid under mask)

    def region(self, key: int, lo: int = 0, hi: int | None = None) -> torch.Tensor | None:
        """The bytes ``[lo, hi)`` of ``key`` these calls write (a bool mask), None when none."""
        m = self.mask.get(key)
        if m is None:
            return None
        m = m[lo:hi]
        return m if bool(m.any()) else None

    def holds(self, key: int, current: torch.Tensor, lo: int = 0, hi: int | None = None) -> bool:
        """Do the bytes ``current`` (the whole storage) hold what these calls write in ``[lo, hi)``?"""
        m = self.region(key, lo, hi)
        if m is None:
            return False
        return bool(torch.equal(current[lo:hi][m], self.value[key][lo:hi][m]))

    def zeroes(self, key: int, lo: int = 0, hi: int | None = None) -> bool:
        """Do these calls write only zero bytes into ``[lo, hi)`` of ``key`` (a ``zero_()``: a plan cleared, no
        batch's values), or nothing?  (Zeros, not any repeated value: a batch's ``last_page_len`` can be all ones.)"""
        m = self.region(key, lo, hi)
        return m is None or not bool(self.value[key][lo:hi][m].any())


@dataclass
class PrepareLedger:
    """``prepare`` run four times (:func:`prepare_calls`): the calls of the failing step's own
    parity (``step``: the 2nd and 4th) and the others (``other``: the 1st and 3rd), each pair over
    both fills, so each parity's writes are exact for a prepare whose behaviour repeats every one
    or two calls.  Four calls also leave a prepare that alternates where it found it."""

    step: Writes
    other: Writes

    def written(self, key: int, lo: int = 0, hi: int | None = None) -> bool:
        """Does some call write bytes ``[lo, hi)`` of ``key``?"""
        return self.step.region(key, lo, hi) is not None or self.other.region(key, lo, hi) is not None

    def alternating(self, key: int, lo: int = 0, hi: int | None = None) -> bool:
        """Is ``[lo, hi)`` of ``key`` written on calls of one parity only?"""
        return (self.step.region(key, lo, hi) is None) != (self.other.region(key, lo, hi) is None)

    def holds(self, key: int, current: torch.Tensor, lo: int = 0, hi: int | None = None) -> bool:
        """Does ``current`` (the storage's bytes as the replay read them) hold, in ``[lo, hi)``, what a
        call of prepare writes there: was it written for this batch?"""
        return any(w.holds(key, current, lo, hi) for w in (self.step, self.other))

    def keys(self) -> set[int]:
        return set(self.step.mask) | set(self.other.mask)


def prepare_calls(tensors: dict[int, torch.Tensor], run_prepare: Callable[[], Any]) -> PrepareLedger:
    """Which elements of ``tensors`` each parity of ``run_prepare`` calls writes, and with what.

    Four calls over the fills zero, zero, other, other (:func:`fill_other`): calls 1 and 3, and
    calls 2 and 4, each see both fills, so a written element shows whatever its value.  The
    buffers are restored afterwards.
    """
    snap = Snapshot(tensors)
    seen: list[dict[int, tuple[torch.Tensor, torch.Tensor]]] = []  # per call: key -> (written, bytes)
    try:
        for fill in (fill_zero, fill_zero, fill_other, fill_other):
            for t in tensors.values():
                fill(t)
            ref = {k: byte_view(t).clone() for k, t in tensors.items()}
            run_prepare()
            call = {}
            for k, t in tensors.items():
                now = byte_view(t)
                if torch.equal(now, ref[k]):
                    continue
                elem = (_elements(t, now) != _elements(t, ref[k])).any(dim=1, keepdim=True)
                call[k] = (elem.expand(-1, _elements(t, now).shape[1]).reshape(-1).clone(), now.clone())
            seen.append(call)
            snap.restore()
    finally:
        snap.restore()
    return PrepareLedger(_merge(seen[1], seen[3]), _merge(seen[0], seen[2]))


def _merge(a: dict, b: dict) -> Writes:
    """One parity's writes from its call over zeros (``a``) and its call over the other fill (``b``)."""
    out = Writes()
    for k in set(a) | set(b):
        if k in a and k in b:
            (ma, va), (mb, vb) = a[k], b[k]
            out.mask[k] = ma | mb
            out.value[k] = torch.where(ma, va, vb)
        else:
            out.mask[k], out.value[k] = a[k] if k in a else b[k]
    return out

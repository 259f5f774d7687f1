"""Hazard operators: each makes a subclass of a subject at run time (the subject's source is never edited).

An operator has a name, the finding kind it is expected to cause (``None``: an equivalent operator, whose
mutants should replay exactly as they run eagerly), a scope (one mutant per subject, or one per chosen
buffer of the subject's :class:`~mutation.subjects.Profile`) and a ``make`` that returns the subclass.
Methods wrap the subject's own (``prepare``, its ``prepare_capture`` where it has one, ``forward``), so the
mutant differs from the subject only in what the operator says.

Where the expected kind depends on the subject, :meth:`Operator.expected_for` decides it, from the ground truth's
experiment where there is one: ``rebind_fresh`` expects ``stale-pointer`` when the replayed graph read memory
freed since capture (nothing else held the old tensor), ``unpersisted-metadata`` when another holder kept it
alive.  Before the ground truth has run (``--list``) the profile stands in: another path to the same storage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from graphsafe.contract import Batch, Target, capturing

from .subjects import Buffer, Profile, resolve_steps

__all__ = ["Operator", "OPERATORS", "by_name", "live_count", "mutants_of"]


def live_count(rows: str, batch: Batch) -> int:
    """How many leading rows of a buffer whose dim 0 counts ``rows`` hold this batch's live entries."""
    return {
        "reqs": batch.num_reqs,
        "reqs+1": batch.num_reqs + 1,
        "tokens": batch.num_tokens,
        "tokens+1": batch.num_tokens + 1,
    }[rows]


def _get(obj: Any, buf: Buffer) -> torch.Tensor:
    holder, (item, key) = resolve_steps(obj, buf.step_tuple)
    return holder[key] if item else getattr(holder, key)


def _set(obj: Any, buf: Buffer, value: torch.Tensor) -> None:
    holder, (item, key) = resolve_steps(obj, buf.step_tuple)
    if item:
        holder[key] = value
    else:
        setattr(holder, key, value)


def _first(out: Any) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out[0]


def _subclass(cls: Any, label: str, prepare: Callable | None = None, forward: Callable | None = None, **extra) -> type:
    """``cls`` with ``prepare(self, batch, parent)`` wrapped around its prepare (and its prepare_capture, when it
    has its own) and ``forward(self, parent)`` around its forward; ``parent`` is the subject's method, bound."""
    ns: dict[str, Any] = {"__module__": __name__, "__qualname__": label, "name": label, "expected": None, **extra}
    if prepare is not None:
        ns["prepare"] = lambda self, batch: prepare(self, batch, lambda b: cls.prepare(self, b))
        if getattr(cls, "prepare_capture", Target.prepare_capture) is not Target.prepare_capture:
            ns["prepare_capture"] = lambda self, batch: prepare(self, batch, lambda b: cls.prepare_capture(self, b))
    if forward is not None:
        ns["forward"] = lambda self: forward(self, lambda: cls.forward(self))
    return type(label.replace(":", "_").replace("|", "__").replace(".", "_"), (cls,), ns)


@dataclass(frozen=True)
class Operator:
    """One hazard operator (see the module docstring)."""

    name: str
    expected: str | None  # None: equivalent by design
    scope: str  # "subject", "buffer" (a written buffer), "rows" (a written buffer with per-slot rows), "unread"
    doc: str
    build: Callable[..., type]
    needs_rebind: bool = False

    def expected_for(self, buf: Buffer | None, truth: dict | None = None) -> str | None:
        """The kind this operator's mutant of ``buf`` should get; ``truth``: the mutant's ground truth."""
        if self.name == "rebind_fresh":
            if truth is not None and truth.get("truth") == "real":
                return "stale-pointer" if truth.get("symptom") == "reads-freed-memory" else "unpersisted-metadata"
            if buf is not None and buf.shared:
                return "unpersisted-metadata"
        return self.expected

    def make(self, cls: type, label: str, buf: Buffer | None) -> type:
        return self.build(cls, label, buf) if self.scope != "subject" else self.build(cls, label)


# -- real operators -----------------------------------------------------------------------------------------------
def _rebind_fresh(cls: type, label: str, buf: Buffer) -> type:
    def prepare(self, batch, parent):
        _set(self, buf, _get(self, buf).clone())  # the old tensor loses this reference
        parent(batch)

    return _subclass(cls, label, prepare)


def _rebind_keep(cls: type, label: str, buf: Buffer) -> type:
    def prepare(self, batch, parent):
        _set(self, buf, _get(self, buf).clone())
        parent(batch)

    def forward(self, parent):
        if capturing():  # the engine keeps what each graph was captured with alive
            self.__dict__.setdefault("_mut_kept", []).append(_get(self, buf))
        return parent()

    return _subclass(cls, label, prepare, forward)


def _double_buffer(cls: type, label: str, buf: Buffer) -> type:
    def prepare(self, batch, parent):
        pair = self.__dict__.get("_mut_pair")
        if pair is None:
            pair = self._mut_pair = [_get(self, buf), _get(self, buf).clone()]
            self._mut_flip = 0
        self._mut_flip ^= 1
        _set(self, buf, pair[self._mut_flip])
        parent(batch)

    return _subclass(cls, label, prepare)


def _drop_tail(cls: type, label: str, buf: Buffer) -> type:
    def prepare(self, batch, parent):
        before = _get(self, buf).clone()
        parent(batch)
        n = live_count(buf.rows, batch)
        _get(self, buf)[n:].copy_(before[n:])  # the rows past the live ones keep what they held

    return _subclass(cls, label, prepare)


def _pad_alias(cls: type, label: str, buf: Buffer) -> type:
    def prepare(self, batch, parent):
        parent(batch)
        t, n = _get(self, buf), live_count(buf.rows, batch)
        if 0 < n < t.shape[0]:
            t[n:].copy_(t[:1].expand_as(t[n:]))  # padded rows point at the first live row's entry

    return _subclass(cls, label, prepare)


def _lazy_guard(cls: type, label: str, buf: Buffer, paired: bool = False) -> type:
    def prepare(self, batch, parent):
        before = _get(self, buf).clone()
        parent(batch)
        t = _get(self, buf)
        pending = self.__dict__.get("_mut_pending")
        if pending is None:
            pending = self._mut_pending = torch.empty_like(t)
        pending.copy_(t)  # this step's values, applied by forward() when it plans
        t.copy_(before)
        self._mut_planned = {False: False, True: False}

    def forward(self, parent):
        key = capturing() if paired else False  # paired: warm-up and capture keep their own flag
        if not self._mut_planned[key]:
            _get(self, buf).copy_(self._mut_pending)
            self._mut_planned[key] = True
        return parent()

    return _subclass(cls, label, prepare, forward)


def _host_scalar(cls: type, label: str) -> type:
    def prepare(self, batch, parent):
        parent(batch)
        self._mut_longest = batch.max_seq_len

    def forward(self, parent):
        out = parent()
        _first(out).mul_(64.0 / (64.0 + self._mut_longest))  # a length normalisation from this batch, on the host
        return out

    return _subclass(cls, label, prepare, forward)


def _sync_forward(cls: type, label: str) -> type:
    def forward(self, parent):
        out = parent()
        self._mut_peak = float(_first(out).float().abs().amax().item())  # a device -> host read
        return out

    return _subclass(cls, label, forward=forward)


# -- equivalent operators -----------------------------------------------------------------------------------------
def _write_twice(cls: type, label: str, buf: Buffer) -> type:
    def prepare(self, batch, parent):
        parent(batch)
        t = _get(self, buf)
        final = t.clone()
        t.fill_(1)  # written again, then back to the parent's values
        t.copy_(final)

    return _subclass(cls, label, prepare)


def _fixup_live(cls: type, label: str, buf: Buffer) -> type:
    def prepare(self, batch, parent):
        parent(batch)
        t, n = _get(self, buf), live_count(buf.rows, batch)
        t[:n].copy_(t[:n].clone())  # the subclass rewrites the live rows the parent wrote, with the same values

    return _subclass(cls, label, prepare)


def _rebind_unread(cls: type, label: str, buf: Buffer) -> type:
    def prepare(self, batch, parent):
        _set(self, buf, _get(self, buf).clone())
        parent(batch)

    return _subclass(cls, label, prepare)


def _fresh_temp(cls: type, label: str) -> type:
    def prepare(self, batch, parent):
        parent(batch)
        self._mut_scratch = torch.full((batch.num_tokens + 1,), float(batch.max_seq_len))  # never read by forward

    return _subclass(cls, label, prepare)


def _host_int_noop(cls: type, label: str) -> type:
    def prepare(self, batch, parent):
        parent(batch)
        self._mut_tokens = batch.num_tokens

    def forward(self, parent):
        self._mut_seen = self._mut_tokens + 1  # a host value from the batch that no kernel uses
        return parent()

    return _subclass(cls, label, prepare, forward)


def _sync_prepare(cls: type, label: str, buf: Buffer) -> type:
    def prepare(self, batch, parent):
        parent(batch)
        self._mut_total = float(_get(self, buf).float().sum().item())  # a device -> host read outside forward

    return _subclass(cls, label, prepare)


OPERATORS: list[Operator] = [
    Operator(
        "rebind_fresh",
        "stale-pointer",
        "buffer",
        "prepare() rebinds the buffer to a fresh copy, then writes it",
        _rebind_fresh,
        True,
    ),
    Operator(
        "rebind_keep",
        "unpersisted-metadata",
        "buffer",
        "as rebind_fresh, but the captured tensor is kept alive",
        _rebind_keep,
        True,
    ),
    Operator(
        "double_buffer",
        "unpersisted-metadata",
        "buffer",
        "prepare() alternates between two copies of the buffer",
        _double_buffer,
        True,
    ),
    Operator(
        "drop_tail",
        "stale-padding",
        "rows",
        "the rows past the live ones keep what they held (no tail reset)",
        _drop_tail,
    ),
    Operator("pad_alias", "stale-padding", "rows", "padded rows are set to the first live row's entry", _pad_alias),
    Operator(
        "lazy_guard",
        "lazy-init",
        "buffer",
        "the buffer is written by forward() behind a flag the warm-up sets",
        _lazy_guard,
    ),
    Operator(
        "host_scalar",
        "frozen-host-value",
        "subject",
        "forward() scales its output by a host value from the batch",
        _host_scalar,
    ),
    Operator(
        "sync_forward",
        "capture-failure",
        "subject",
        "forward() reads a device value on the host (.item())",
        _sync_forward,
    ),
    Operator(
        "write_twice",
        None,
        "buffer",
        "prepare() writes the buffer again after the parent, same final values",
        _write_twice,
    ),
    Operator(
        "fixup_live", None, "rows", "prepare() calls the parent's and rewrites its live rows correctly", _fixup_live
    ),
    Operator(
        "lazy_paired",
        None,
        "buffer",
        "lazy_guard with separate warm-up and capture flags (the fix)",
        lambda c, l, b: _lazy_guard(c, l, b, paired=True),
    ),
    Operator("rebind_unread", None, "unread", "prepare() rebinds a tensor the graph never reads", _rebind_unread, True),
    Operator("fresh_temp", None, "subject", "prepare() makes a fresh tensor the graph never reads", _fresh_temp),
    Operator(
        "host_int_noop",
        None,
        "subject",
        "forward() reads a host int from the batch that no kernel uses",
        _host_int_noop,
    ),
    Operator("sync_prepare", None, "buffer", "prepare() reads a device value on the host (.item())", _sync_prepare),
]


def by_name(name: str) -> Operator:
    for op in OPERATORS:
        if op.name == name:
            return op
    raise KeyError(f"no operator {name!r}; known: {', '.join(o.name for o in OPERATORS)}")


def _candidates(op: Operator, prof: Profile) -> list[Buffer]:
    if op.scope == "unread":
        pool = [b for b in prof.unread if b.rebindable and b.path.count(".") <= 2]
    else:
        pool = [b for b in prof.written if b.whole and (b.rebindable or not op.needs_rebind)]
        if op.scope == "rows":
            pool = [b for b in pool if b.rows in ("reqs", "tokens")]
    # metadata (integer buffers) where the subject has some: the hazards of interest are in metadata
    ints = [b for b in pool if "int" in b.dtype]
    return sorted(ints or pool, key=lambda b: b.path)


def mutants_of(prof: Profile, per_op: int = 1) -> list[tuple[str, Operator, Buffer | None]]:
    """``(mutant id, operator, buffer)`` for every operator that applies to the subject: per-buffer operators
    take ``per_op`` buffers each, starting at a different buffer for each operator (so that together they
    touch several of the subject's buffers)."""
    out: list[tuple[str, Operator, Buffer | None]] = []
    for i, op in enumerate(OPERATORS):
        if op.scope == "subject":
            out.append((f"{prof.subject}|{op.name}", op, None))
            continue
        pool = _candidates(op, prof)
        for j in range(min(per_op, len(pool))):
            buf = pool[(i + j) % len(pool)]
            out.append((f"{prof.subject}|{op.name}|{buf.path}", op, buf))
    return out

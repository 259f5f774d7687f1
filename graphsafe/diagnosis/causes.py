"""One bug, one finding: findings grouped by the root cause they name.

Every finding names a cause (:attr:`Finding.cause`): the buffer, kernel argument, branch or line at
fault, or only an output when that is all a probe could see.  Findings of one cause become one
finding of the most specific kind its evidence proves; the others' messages stay with it as
supporting evidence (``details["evidence"]``).  Findings that name only an output (a symptom: an
unwritten output, an unexplained difference, a race no buffer carries, padding with no stale buffer to
name) join a finding that names a cause, when there is one.
Two findings in a result therefore mean two causes.  Values frozen by one host decision (the function
that computed them, or the kernel whose captured launch holds them) are one cause: the finding lists them
all (``details["frozen"]``).  A cause is one place in the code: paths that
differ only in a container index (``self.meta[1].kv`` and ``self.meta[4].kv``, one graph's metadata
and another's) name the same cause.
"""

from __future__ import annotations

import re

from ..findings import KINDS, Finding, FindingKind

__all__ = ["group_by_cause", "cause_key", "PRECEDENCE"]

#: most specific first: the kind a group of findings of one cause reports (the registry's precedence)
PRECEDENCE = tuple(sorted(KINDS, key=lambda k: KINDS[k].precedence))
_SYMPTOMS = {k for k, info in KINDS.items() if info.symptom}


_INDEX = re.compile(r"\[[^\[\]]*\]")


def cause_key(cause: str) -> str:
    """The code site a cause names: container indices dropped (``buffer:self.meta[4].kv`` -> ``buffer:self.meta[].kv``)."""
    return _INDEX.sub("[]", cause)


def _symptom(f: Finding) -> bool:
    """A finding that names no cause of its own, only an output: an unwritten output, an unexplained
    difference, two replays that differ where no buffer carries one into the next (a race a frozen grid or
    plan can make), padding that changes a result without a stale buffer to name."""
    return f.kind in _SYMPTOMS or f.cause.startswith("output:")


def _rank(f: Finding) -> int:
    return PRECEDENCE.index(f.kind) if f.kind in PRECEDENCE else len(PRECEDENCE)


def _evidence(f: Finding) -> dict:
    return {
        "kind": f.kind.value,
        "where": f.where,
        "message": f.message,
        "capture_policy": f.details.get("capture_policy", ""),
    }


def _merge(group: list[Finding]) -> Finding:
    # a finding that names the cause leads; a symptom that joined it is evidence, whatever its kind's rank (a
    # race no buffer carries is what stale padding can look like on a GPU: two writes to one stale slot)
    group = sorted(group, key=lambda f: (_symptom(f), _rank(f), f.examples_to_find or 1 << 30))
    head = group[0]
    seen = {(head.kind, head.where)}
    also = []  # values of the same kind the same cause froze elsewhere (another argument, a branch)
    for other in group[1:]:
        if (other.kind, other.where) in seen:
            continue
        seen.add((other.kind, other.where))
        head.details.setdefault("evidence", []).append(_evidence(other))
        if other.kind == head.kind == FindingKind.FROZEN_HOST_VALUE:
            also.append(other.where)
    if also:
        head.details["frozen"] = [head.where, *also]
        head.message += f"; the same host decision also froze: {', '.join(also)}"
    return head


def group_by_cause(findings: list[Finding]) -> list[Finding]:
    """The findings of one check, one per root cause (order: most specific kind first)."""
    errors = [f for f in findings if f.severity == "error"]
    infos = [f for f in findings if f.severity != "error"]
    causes: dict[str, list[Finding]] = {}
    symptoms: list[Finding] = []
    for f in errors:
        if _symptom(f):
            symptoms.append(f)
        else:
            causes.setdefault(cause_key(f.cause), []).append(f)
    if causes:  # a symptom joins the cause it most likely shows: the most specific one
        first = min(causes, key=lambda c: min(_rank(f) for f in causes[c]))
        causes[first].extend(symptoms)
    else:
        for f in symptoms:
            causes.setdefault(f.cause, []).append(f)
    merged = sorted((_merge(g) for g in causes.values()), key=_rank)
    info_seen, kept_infos = set(), []
    for f in infos:
        if f.key not in info_seen:
            info_seen.add(f.key)
            kept_infos.append(f)
    return merged + kept_infos

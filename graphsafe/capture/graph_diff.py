"""Two captured graphs of one target diffed node by node: what the graph that replays froze that another
batch's graph holds otherwise.

A different node sequence is a frozen branch (a kernel one capture launched and the other did not); between
nodes that match, a different grid, block, shared-memory size, copy size or parameter word is a frozen value,
named by the kernel and the parameter (its C++ type when the kernel's name says it).  Addresses are not
values: a word that points into device memory is compared by where it points in the target (the same buffer
at another offset is a frozen value too; another buffer, or memory the target does not hold, is not compared).
Everything that differs between two captures of the same batch (``noise``, from a control capture: padding
bytes, a library's per-instance handles) is left out.  Diffs are dicts in the format of
:func:`graphsafe.diagnosis.probes.frozen_host_value.diff_launches` (``launch`` is ``"graph"``).
"""

from __future__ import annotations

import difflib
import struct
from collections.abc import Set as AbstractSet

from ..engines.addresses import DEVICE, HOST_PINNED, plausible
from ..engines.graph_reader import Node, param_types
from .graph_map import TARGET, GraphMap, Pointer

__all__ = ["diff_graphs", "noise_of"]

_POINTERS = (TARGET, DEVICE, HOST_PINNED)


def _key(n: Node) -> tuple:
    if n.type == "kernel":
        return ("kernel", n.name)
    if n.type == "memcpy":
        return ("memcpy", n.src_kind, n.dst_kind)
    return (n.type,)


def _fmt(data: bytes, ctype: str | None) -> object:
    """A parameter's bytes as its C++ type says (int, float, ...), else as little-endian integers."""
    t = (ctype or "").replace("const", "").strip()
    try:
        if t == "float" and len(data) == 4:
            return round(struct.unpack("<f", data)[0], 7)
        if t == "double" and len(data) == 8:
            return struct.unpack("<d", data)[0]
        if t == "bool" and len(data) == 1:
            return bool(data[0])
    except struct.error:  # pragma: no cover - sizes checked above
        pass
    signed = t in ("int", "long", "long long", "short", "signed char", "int64_t", "int32_t")
    if len(data) in (1, 2, 4, 8):
        return int.from_bytes(data, "little", signed=signed)
    return [int.from_bytes(data[i : i + 4], "little") for i in range(0, len(data) - 3, 4)] or data.hex()


def _address_like(word: int) -> bool:
    """Could ``word`` be an address where a 64-bit Linux process maps memory (the heap, mappings, the stack and
    the device's allocations all lie at or above 2**44)?  A pair of such words that differ is taken for two
    addresses, not for a frozen value, even where the driver could not say what they point to (memory freed by
    then, or mapped in a way it does not answer for): a count or size that large is not a kernel argument."""
    return plausible(word) and word >= 1 << 44


def _base(n: Node) -> dict:
    return {"kernel": n.label, "where": f"graph node {n.index}", "triton": False, "launch": "graph", "node": n.index}


def _pointer_at(gmap: GraphMap) -> dict[tuple[int, int, int], Pointer]:
    return {(p.node, p.param, p.offset): p for p in gmap.pointers if p.kind in _POINTERS and p.param >= 0}


def _param_diffs(
    na: Node,
    nb: Node,
    pa: dict[tuple[int, int, int], Pointer],
    pb: dict[tuple[int, int, int], Pointer],
    ga: GraphMap,
    gb: GraphMap,
    noise: AbstractSet[tuple],
) -> list[dict]:
    out: list[dict] = []
    types = param_types(na.name)
    if types is not None and len(types) != len(na.params):
        types = None
    for prm_a, prm_b in zip(na.params, nb.params):
        if prm_a.size != prm_b.size:
            continue  # (one function: the same layout; a packed buffer of another size is not compared)
        i = prm_a.index
        ctype = types[i] if types else None
        name = f"parameter {i}" + (f" ({ctype})" if ctype else "")
        masked: set[int] = set()
        words_b = dict(prm_b.words())
        for o, word_a in prm_a.words():
            x, y = pa.get((na.index, i, o)), pb.get((nb.index, i, o))
            if x is None and y is None:
                if word_a != words_b.get(o) and _address_like(word_a) and _address_like(words_b.get(o, 0)):
                    masked.update(range(o, o + 8))  # two addresses the driver could not place: not values
                continue
            masked.update(range(o, o + 8))
            if x is not None and y is not None and x.kind == TARGET and y.kind == TARGET:
                path_a, path_b = ga.paths.get(x.key, [""])[:1], gb.paths.get(y.key, [""])[:1]
                key = ("pointer", na.index, i, o)
                if path_a == path_b and path_a[0] and x.at != y.at and key not in noise:  # same buffer, other offset
                    out.append(
                        {
                            **_base(na),
                            "kind": "argument",
                            "argument": f"{name}, bytes {o}:{o + 8}",
                            "key": key,
                            "captured": f"{path_a[0]} +{x.at}",
                            "needed": f"{path_b[0]} +{y.at}",
                        }
                    )
        step = prm_a.size if prm_a.size <= 8 and not masked else 4
        differ = [
            o
            for o in range(0, prm_a.size, step)
            if not masked.intersection(range(o, o + step))
            and ("param", na.index, i, o) not in noise
            and prm_a.data[o : o + step] != prm_b.data[o : o + step]
        ]
        runs: list[list[int]] = []
        for o in differ:  # adjacent differing chunks are one value
            if runs and runs[-1][1] == o:
                runs[-1][1] = min(o + step, prm_a.size)
            else:
                runs.append([o, min(o + step, prm_a.size)])
        for lo, hi in runs:
            whole = lo == 0 and hi == prm_a.size
            out.append(
                {
                    **_base(na),
                    "kind": "argument",
                    "argument": name if whole else f"{name}, bytes {lo}:{hi}",
                    "key": ("param", na.index, i, lo),
                    "chunks": [("param", na.index, i, o) for o in range(lo, hi, step)],
                    "captured": _fmt(prm_a.data[lo:hi], ctype if whole else None),
                    "needed": _fmt(prm_b.data[lo:hi], ctype if whole else None),
                }
            )
    return out


def noise_of(diffs: list[dict]) -> set:
    """The keys of everything that differs between two captures of the same batch (a control's diffs)."""
    out = set()
    for d in diffs:
        out.add(d["key"])
        out.update(d.get("chunks", ()))
    return out


def diff_graphs(a: GraphMap, b: GraphMap, noise: AbstractSet[tuple] = frozenset()) -> list[dict]:
    """How graph ``b`` (another batch's capture) differs from ``a`` (the one that replays), ``noise`` (from
    :func:`noise_of` over a control's diffs) left out; the branches alone when the node sequences differ."""
    na, nb = a.read.nodes, b.read.nodes
    ka, kb = [_key(n) for n in na], [_key(n) for n in nb]
    if ka != kb:
        out = []
        sm = difflib.SequenceMatcher(a=ka, b=kb, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                continue
            cap, need = na[i1:i2], nb[j1:j2]
            first = (cap or need)[0]
            out.append(
                {
                    **_base(first),
                    "kind": "branch",
                    "key": ("branch", i1),
                    "argument": "<launch sequence>",
                    "captured": [n.label for n in cap][:4],
                    "needed": [n.label for n in need][:4],
                }
            )
        return out
    pa, pb = _pointer_at(a), _pointer_at(b)
    out = []
    for x, y in zip(na, nb):
        for field_name, va, vb in (
            ("grid", x.grid, y.grid),
            ("block", x.block, y.block),
            ("shared memory", x.shared, y.shared),
            ("bytes", x.nbytes, y.nbytes),
            ("value", x.value, y.value),
        ):
            key = ("field", x.index, field_name)
            if va != vb and key not in noise:
                out.append(
                    {**_base(x), "kind": "grid", "argument": field_name, "key": key, "captured": va, "needed": vb}
                )
        if x.type == "kernel":
            out.extend(_param_diffs(x, y, pa, pb, a, b, noise))
    return out

"""The graph that replays, mapped onto the target at capture: which of the target's storages each address in
the graph's nodes lies in, under which attribute paths.

Every 8-byte-aligned word of every kernel parameter, and every memcpy and memset address, is looked up among
the storages the target holds (each ``[data_ptr, data_ptr + nbytes)``); a word in none of them is classified by
the address space (device memory the target does not hold: the graph's own pool, a library's workspace; host
memory the device reads; other host memory; or no address).  Done once per capture, never per step:
:func:`attach` adds every storage the graph points into to the recording's external buffers (weak references,
checked before every replay like the ones the recorder found), so that a kernel nobody wrapped that reads a
buffer ``prepare()`` rebinds is a ``stale-pointer`` before the replay that would read freed memory.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import torch

from ..engines.addresses import DEVICE, HOST, HOST_PINNED
from ..engines.graph_reader import GraphRead, Node
from ..engines.recording import ExternalBuffer, Recorder

__all__ = ["Pointer", "GraphMap", "map_graph", "sizes_of", "attach", "TARGET"]

#: a pointer into a storage the target holds
TARGET = "target"


@dataclass(frozen=True)
class Pointer:
    """One address in a graph node: where it is (node, parameter, byte offset), its value, what it points into."""

    node: int
    label: str  # the kernel's short name, or the node's type
    param: int  # parameter index; -1 for a memcpy's or memset's own address
    offset: int  # byte offset in the parameter
    value: int
    kind: str  # TARGET, or an address kind (device, host-pinned, host)
    role: str = ""  # memcpy: "source" / "destination"; memset: "destination"
    key: int = 0  # the storage the target holds, when kind is TARGET
    at: int = 0  # byte offset in that storage

    def where(self) -> str:
        """``BatchDecodeWithPagedKVCacheKernel (node 0) parameter 0, bytes 8:16`` or ``memcpy (node 2) source``."""
        if self.param < 0:
            return f"{self.label} (node {self.node}) {self.role}"
        return f"{self.label} (node {self.node}) parameter {self.param}, bytes {self.offset}:{self.offset + 8}"


@dataclass
class GraphMap:
    """A graph's nodes and the addresses in them, mapped onto the target at capture."""

    read: GraphRead
    pointers: list[Pointer]
    paths: dict[int, list[str]]  # storage key -> the target's paths to it at capture
    nbytes: dict[int, int] = field(default_factory=dict)  # storage key -> its size
    written: set[int] = field(default_factory=set)  # storages a memcpy or memset node writes

    def held(self) -> dict[int, list[Pointer]]:
        """storage key -> the pointers into it, for every storage of the target the graph points into."""
        out: dict[int, list[Pointer]] = {}
        for p in self.pointers:
            if p.kind == TARGET:
                out.setdefault(p.key, []).append(p)
        return out

    def name(self, p: Pointer) -> str:
        """What ``p`` pointed at when the graph was captured: the target's path and the offset into it, else its
        kind of memory."""
        if p.kind == TARGET:
            paths = self.paths.get(p.key) or [f"<storage at {p.key:#x}>"]
            return paths[0] + (f" (+{p.at} bytes)" if p.at else "")
        return {DEVICE: "device memory the target does not hold", HOST_PINNED: "pinned host memory"}.get(
            p.kind, "host memory"
        )

    def host_reads(self) -> list[Pointer]:
        """Host memory the graph reads that the target does not hold: a memcpy's host source, or a kernel
        parameter that points to host memory the device can read (pinned or registered)."""
        return [
            p
            for p in self.pointers
            if (p.role == "source" and p.kind in (HOST, HOST_PINNED)) or (p.param >= 0 and p.kind == HOST_PINNED)
        ]


class _Storages:
    """The target's storages as sorted address intervals, for one capture's lookups."""

    def __init__(self, sizes: dict[int, int]):
        self.items = sorted(sizes.items())
        self.starts = [k for k, _ in self.items]

    def find(self, addr: int) -> tuple[int, int] | None:
        """``(storage key, offset)`` of the storage holding ``addr``, if any."""
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0:
            key, n = self.items[i]
            if addr < key + n:
                return key, addr - key
        return None


def sizes_of(tensors: dict[int, torch.Tensor]) -> dict[int, int]:
    """storage key -> its size in bytes, for :func:`map_graph`."""
    return {k: t.untyped_storage().nbytes() for k, t in tensors.items()}


def map_graph(read: GraphRead, sizes: dict[int, int], paths: dict[int, list[str]], space: Any) -> GraphMap:
    """Map every address in ``read``'s nodes onto the target's storages (``sizes``: storage key -> bytes, from
    :func:`sizes_of`; ``paths``: their attribute paths); the others classified by ``space``
    (:class:`~graphsafe.engines.addresses.AddressSpace`)."""
    storages = _Storages(sizes)
    pointers: list[Pointer] = []
    written: set[int] = set()

    def add(node: Node, param: int, offset: int, value: int, role: str = "") -> Pointer | None:
        hit = storages.find(value)
        if hit is not None:
            p = Pointer(node.index, node.label, param, offset, value, TARGET, role, hit[0], hit[1])
        else:
            kind = space.kind(value)
            if kind is None:
                return None
            p = Pointer(node.index, node.label, param, offset, value, kind, role)
        pointers.append(p)
        return p

    for node in read.nodes:
        if node.type == "kernel":
            for prm in node.params:
                for offset, value in prm.words():
                    add(node, prm.index, offset, value)
        elif node.type == "memcpy":
            add(node, -1, 0, node.src, "source")
            p = add(node, -1, 0, node.dst, "destination")
            if p is not None and p.kind == TARGET:
                written.add(p.key)
        elif node.type == "memset":
            p = add(node, -1, 0, node.dst, "destination")
            if p is not None and p.kind == TARGET:
                written.add(p.key)
    keys = {p.key for p in pointers if p.kind == TARGET}
    return GraphMap(
        read,
        pointers,
        {k: list(paths.get(k, [])) for k in keys},
        {k: sizes[k] for k in keys},
        written,
    )


def attach(gmap: GraphMap, rec: Recorder, tensors: dict[int, torch.Tensor]) -> None:
    """Add every storage of the target the graph points into (but the graph's own allocations) to ``rec``'s
    external buffers, each with where the graph points into it: the per-step stale-pointer check then covers
    kernels nobody wrapped, at the cost of one weak reference each.  The ones only the graph shows are marked
    ``graph_only``: an address in a kernel's parameters is no proof the kernel reads it, so the write ledger's
    probes (lazy-init, unpersisted-metadata) do not take them for reads."""
    for key, ptrs in gmap.held().items():
        if key in rec.internal:
            continue
        buf = rec.external.get(key)
        if buf is None:
            buf = rec.external[key] = ExternalBuffer.of(tensors[key], key, ptrs[0].where(), graph_only=True)
        for p in ptrs:
            if p.label not in buf.kernels:
                buf.kernels.append(p.label)
            where = p.where()
            if where not in buf.refs:
                buf.refs.append(where)

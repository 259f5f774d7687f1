"""Read a captured CUDA graph back: every node in order, each kernel's name, grid, block and parameter bytes,
each memcpy's and memset's addresses.

The recorder sees what Python launches through the aten dispatcher, Triton and :func:`opaque_call`; the graph
that replays is the driver's object, and it holds every kernel, whoever launched it (an extension module, cuBLAS,
a TVM-FFI library).  A graph captured with ``torch.cuda.CUDAGraph(keep_graph=True)`` gives its ``cudaGraph_t``
(``raw_cuda_graph()``), and the driver API lists its nodes: ``cuGraphKernelNodeGetParams`` gives a kernel's
function, launch shape and parameter buffer (``kernelParams``: one address per parameter; or ``extra``: one
packed buffer, as cuBLAS launches its ``nvjet`` kernels), ``cuFuncGetParamInfo`` each parameter's offset and
size, ``cuFuncGetName`` its mangled name.

It needs the ``cuda-bindings`` package (``pip install 'graphsafe[graph]'``), imported on first use;
:func:`unavailable` says why the reader is off, or None.  ``GRAPHSAFE_GRAPH_READER=0`` switches it off.
Nodes are plain data (:class:`Node`), written to and read from JSON for the committed fixtures.
"""

from __future__ import annotations

import ctypes
import functools
import heapq
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Param", "Node", "GraphRead", "unavailable", "read_graph", "demangle", "short_name", "INSTALL_HINT"]

#: what the reader needs, said wherever it is off
INSTALL_HINT = "the graph reader needs the cuda-bindings package (pip install 'graphsafe[graph]')"
_MAX_PARAMS = 4096  # parameters read at most per kernel (a kernel has a few dozen; this bounds a bad answer)
_EXTRA_PAIRS = 16  # key/value pairs read at most from a kernel's ``extra`` list (cuBLAS passes two)


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its index, its byte offset in the parameter buffer, and its bytes as captured."""

    index: int
    offset: int
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    def words(self) -> Iterator[tuple[int, int]]:
        """``(offset in the parameter, value)`` of every 8-byte word aligned to 8 bytes of the buffer: where
        a pointer can be (a by-value struct holds its pointers aligned)."""
        start = -self.offset % 8
        for o in range(start, self.size - 7, 8):
            yield o, int.from_bytes(self.data[o : o + 8], "little")


@dataclass(frozen=True)
class Node:
    """One node of a captured graph.  ``type``: ``kernel``, ``memcpy``, ``memset`` or the driver's name of
    another type (``event_record``, ``graph``, ...).  Kernels: ``name`` (mangled), ``grid``, ``block``,
    ``shared`` bytes, ``params`` and where they came from (``source``: ``kernelParams``, ``extra``, or ''
    when they could not be read).  Memcpy: ``src``/``dst`` addresses and their memory kinds (``host``,
    ``device``, ``array``, ``unified``), ``nbytes``.  Memset: ``dst``, ``value``, ``element_size``, ``nbytes``."""

    index: int
    type: str
    name: str = ""
    grid: tuple[int, ...] = ()
    block: tuple[int, ...] = ()
    shared: int = 0
    params: tuple[Param, ...] = ()
    source: str = ""
    src: int = 0
    src_kind: str = ""
    dst: int = 0
    dst_kind: str = ""
    nbytes: int = 0
    value: int = 0
    element_size: int = 0

    @property
    def label(self) -> str:
        """How findings name the node: the kernel's short name, or the node's type."""
        return short_name(self.name) if self.type == "kernel" else self.type

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "type": self.type}
        if self.type == "kernel":
            d.update(name=self.name, grid=list(self.grid), block=list(self.block), shared=self.shared)
            d["source"] = self.source
            d["params"] = [{"index": p.index, "offset": p.offset, "hex": p.data.hex()} for p in self.params]
        elif self.type == "memcpy":
            d.update(src=self.src, src_kind=self.src_kind, dst=self.dst, dst_kind=self.dst_kind, nbytes=self.nbytes)
        elif self.type == "memset":
            d.update(dst=self.dst, value=self.value, element_size=self.element_size, nbytes=self.nbytes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Node:
        params = tuple(Param(p["index"], p["offset"], bytes.fromhex(p["hex"])) for p in d.get("params", ()))
        keep: dict[str, Any] = {
            k: d[k] for k in ("name", "shared", "source", "src", "src_kind", "dst", "dst_kind") if k in d
        }
        keep.update({k: d[k] for k in ("nbytes", "value", "element_size") if k in d})
        return cls(
            index=d["index"],
            type=d["type"],
            grid=tuple(d.get("grid", ())),
            block=tuple(d.get("block", ())),
            params=params,
            **keep,
        )


@dataclass
class GraphRead:
    """What reading one graph gave: its nodes in launch order, what could not be read, and the seconds it took."""

    nodes: list[Node]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def kernels(self) -> list[Node]:
        return [n for n in self.nodes if n.type == "kernel"]

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": [n.to_dict() for n in self.nodes], "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GraphRead:
        return cls([Node.from_dict(n) for n in d["nodes"]], list(d.get("notes", ())))


# -- names -----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """A C++ kernel name demangled (``scale_add(float const*, float const*, float*, int, float)``), by the
    C++ runtime's ``__cxa_demangle``; the name itself when it is not mangled or cannot be demangled."""
    if not name.startswith("_Z"):
        return name
    fn = _cxa_demangle()
    if fn is None:
        return name
    status = ctypes.c_int(0)
    out = fn(name.encode(), None, None, ctypes.byref(status))
    if not out or status.value != 0:
        return name
    try:
        return (ctypes.cast(out, ctypes.c_char_p).value or b"").decode(errors="replace")  # (not null: checked above)
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(out))


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> Any:
    for lib in ("libstdc++.so.6", "libc++.so.1", None):
        try:
            fn = ctypes.CDLL(lib).__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        return fn
    return None


@functools.lru_cache(maxsize=4096)
def short_name(name: str) -> str:
    """A kernel's name without namespaces, template arguments and parameter list
    (``flashinfer::BatchDecodeWithPagedKVCacheKernel<...>(...)`` -> ``BatchDecodeWithPagedKVCacheKernel``)."""
    full = demangle(name)
    depth, out = 0, []
    for ch in full:  # drop everything inside <...> and (...)
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    text = "".join(out).strip()
    text = text.split(" ")[-1] if " " in text else text  # a return type ("void f") goes
    return text.rsplit("::", 1)[-1] or full


def param_types(name: str) -> list[str] | None:
    """The parameter types of a mangled kernel name, from its demangled signature (None when it has none)."""
    full = demangle(name)
    if full == name or not full.endswith(")"):
        return None
    depth, start = 0, None
    for i in range(len(full) - 1, -1, -1):  # the parameter list's opening parenthesis, from the end
        ch = full[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                start = i
                break
    if start is None:
        return None
    inner, depth = full[start + 1 : -1], 0
    parts: list[str] = []
    cur: list[str] = []
    for ch in inner:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


# -- the driver ------------------------------------------------------------------------------------------
def unavailable() -> str | None:
    """None when graphs can be read here, else one line saying why not (switched off, no cuda-bindings)."""
    if os.environ.get("GRAPHSAFE_GRAPH_READER", "1") == "0":
        return "the graph reader is switched off (GRAPHSAFE_GRAPH_READER=0)"
    return _import_error()


@functools.lru_cache(maxsize=1)
def _import_error() -> str | None:
    try:
        from cuda.bindings import driver  # noqa: F401  (optional: graphsafe[graph])
    except Exception as e:  # noqa: BLE001 - any failure to import means: no reader here
        return f"{INSTALL_HINT}; importing it failed ({type(e).__name__}: {e})"
    return None


def _driver() -> Any:
    from cuda.bindings import driver  # optional dependency, present: unavailable() said so

    return driver


def _ok(res: Any) -> Any:
    """The values of a driver call's result tuple after its error code; a RuntimeError for an error."""
    err = res[0] if isinstance(res, tuple) else res
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {getattr(err, 'name', err)}")
    rest = res[1:] if isinstance(res, tuple) else ()
    return rest[0] if len(rest) == 1 else rest


class _Functions:
    """Per kernel function (by handle): its mangled name and its parameters' (offset, size), asked once."""

    def __init__(self, cu: Any):
        self.cu = cu
        self.names: dict[int, str] = {}
        self.layouts: dict[int, list[tuple[int, int]] | None] = {}

    def name(self, func: Any) -> str:
        h = int(func)
        if h not in self.names:
            try:
                raw = _ok(self.cu.cuFuncGetName(func))
                self.names[h] = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            except Exception:  # noqa: BLE001 - a nameless function is still a kernel node
                self.names[h] = f"<function {h:#x}>"
        return self.names[h]

    def layout(self, func: Any) -> list[tuple[int, int]] | None:
        """``(offset, size)`` per parameter (cuFuncGetParamInfo, until it says there is no such parameter);
        None when the driver cannot say (CUDA < 12.4)."""
        h = int(func)
        if h not in self.layouts:
            info = getattr(self.cu, "cuFuncGetParamInfo", None)
            out: list[tuple[int, int]] | None = None
            if info is not None:
                out = []
                for i in range(_MAX_PARAMS):
                    res = info(func, i)
                    if int(res[0]) != 0:
                        break
                    out.append((int(res[1]), int(res[2])))
            self.layouts[h] = out
        return self.layouts[h]


def _kernel(cu: Any, fns: _Functions, node: Any, index: int, space: Any, notes: list[str]) -> Node:
    p = _ok(cu.cuGraphKernelNodeGetParams(node))
    func = p.func
    if not int(func) and int(getattr(p, "kern", 0) or 0):  # launched as a CUkernel: its function in this context
        func = _ok(cu.cuKernelGetFunction(p.kern))
    name = fns.name(func)
    layout = fns.layout(func)
    params: tuple[Param, ...] = ()
    source = ""
    kp, extra = int(p.kernelParams or 0), int(p.extra or 0)
    if kp and layout is not None:
        slots = (ctypes.c_void_p * len(layout)).from_address(kp) if layout else ()
        params = tuple(
            Param(i, off, ctypes.string_at(addr, size) if size and (addr := slots[i]) else b"")
            for i, (off, size) in enumerate(layout)
        )
        source = "kernelParams"
    elif extra:
        buf = _extra_buffer(extra, space)
        if buf is not None:
            source = "extra"
            if layout:
                params = tuple(Param(i, off, buf[off : off + size]) for i, (off, size) in enumerate(layout))
            else:
                params = (Param(0, 0, buf),)
    if not source:
        notes.append(f"{short_name(name)} (node {index}): its parameters could not be read")
    return Node(
        index=index,
        type="kernel",
        name=name,
        grid=(int(p.gridDimX), int(p.gridDimY), int(p.gridDimZ)),
        block=(int(p.blockDimX), int(p.blockDimY), int(p.blockDimZ)),
        shared=int(p.sharedMemBytes),
        params=params,
        source=source,
    )


def _extra_buffer(extra: int, space: Any) -> bytes | None:
    """The packed parameter buffer an ``extra`` launch list points to: pairs of (key, value) pointers ending at
    key 0, where key 1 gives the buffer's address and key 2 the address of its size (a size_t).  Every address
    is checked readable in this process's memory map before it is read (a bad one would crash the process)."""
    if not space.readable(extra, 16):
        return None
    buf_at, size_at = 0, 0
    for i in range(_EXTRA_PAIRS):
        if not space.readable(extra + 16 * i, 16):
            return None
        key = ctypes.c_size_t.from_address(extra + 16 * i).value
        value = ctypes.c_size_t.from_address(extra + 16 * i + 8).value
        if key == 0:  # CU_LAUNCH_PARAM_END
            break
        if key == 1:  # CU_LAUNCH_PARAM_BUFFER_POINTER
            buf_at = value
        elif key == 2:  # CU_LAUNCH_PARAM_BUFFER_SIZE (a pointer to the size)
            size_at = value
    if not buf_at or not size_at or not space.readable(size_at, 8):
        return None
    size = ctypes.c_size_t.from_address(size_at).value
    if size > 1 << 16 or not space.readable(buf_at, size):
        return None
    return ctypes.string_at(buf_at, size)


_MEMORY_KINDS = {1: "host", 2: "device", 3: "array", 4: "unified"}


def _memcpy(cu: Any, node: Any, index: int) -> Node:
    p = _ok(cu.cuGraphMemcpyNodeGetParams(node))
    src_kind = _MEMORY_KINDS.get(int(p.srcMemoryType), str(int(p.srcMemoryType)))
    dst_kind = _MEMORY_KINDS.get(int(p.dstMemoryType), str(int(p.dstMemoryType)))
    src = int(p.srcHost or 0) if src_kind == "host" else int(p.srcDevice)
    dst = int(p.dstHost or 0) if dst_kind == "host" else int(p.dstDevice)
    src += int(p.srcXInBytes) + int(p.srcY) * int(p.srcPitch)
    dst += int(p.dstXInBytes) + int(p.dstY) * int(p.dstPitch)
    nbytes = int(p.WidthInBytes) * max(1, int(p.Height)) * max(1, int(p.Depth))
    return Node(index=index, type="memcpy", src=src, src_kind=src_kind, dst=dst, dst_kind=dst_kind, nbytes=nbytes)


def _memset(cu: Any, node: Any, index: int) -> Node:
    p = _ok(cu.cuGraphMemsetNodeGetParams(node))
    es = int(p.elementSize)
    return Node(
        index=index,
        type="memset",
        dst=int(p.dst),
        dst_kind="device",
        value=int(p.value),
        element_size=es,
        nbytes=int(p.width) * es * max(1, int(p.height)),
    )


def _in_order(cu: Any, graph: Any, nodes: list) -> list:
    """``nodes`` in a topological order of the graph's edges, ties kept in the driver's order (creation order:
    one stream's capture is a chain)."""
    try:
        res = cu.cuGraphGetEdges(graph)
        n = int(res[-1])
        res = cu.cuGraphGetEdges(graph, n)
        frm, to = res[1], res[2]  # (cuda-bindings 13 adds the edge data before the count)
    except Exception:  # noqa: BLE001 - without edges, the driver's order
        return nodes
    pos = {int(x): i for i, x in enumerate(nodes)}
    after: dict[int, list[int]] = {i: [] for i in range(len(nodes))}
    waits = [0] * len(nodes)
    for a, b in zip(frm[:n], to[:n]):
        ia, ib = pos.get(int(a)), pos.get(int(b))
        if ia is not None and ib is not None:
            after[ia].append(ib)
            waits[ib] += 1
    ready = [i for i in range(len(nodes)) if waits[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in after[i]:
            waits[j] -= 1
            if waits[j] == 0:
                heapq.heappush(ready, j)
    return [nodes[i] for i in order] if len(order) == len(nodes) else nodes


def read_graph(raw: int, space: Any) -> GraphRead:
    """Every node of the ``cudaGraph_t`` ``raw`` (``CUDAGraph.raw_cuda_graph()``), in launch order.
    ``space`` (:class:`graphsafe.engines.addresses.AddressSpace`) says which host addresses are readable."""
    t0 = time.perf_counter()
    cu = _driver()
    graph = cu.CUgraph(int(raw))
    n = int(_ok(cu.cuGraphGetNodes(graph))[-1])
    handles = list(_ok(cu.cuGraphGetNodes(graph, n))[0])[:n] if n else []
    fns = _Functions(cu)
    types = cu.CUgraphNodeType
    out: list[Node] = []
    notes: list[str] = []
    for index, node in enumerate(_in_order(cu, graph, handles)):
        t = _ok(cu.cuGraphNodeGetType(node))
        try:
            if t == types.CU_GRAPH_NODE_TYPE_KERNEL:
                out.append(_kernel(cu, fns, node, index, space, notes))
            elif t == types.CU_GRAPH_NODE_TYPE_MEMCPY:
                out.append(_memcpy(cu, node, index))
            elif t == types.CU_GRAPH_NODE_TYPE_MEMSET:
                out.append(_memset(cu, node, index))
            else:
                out.append(Node(index=index, type=t.name.replace("CU_GRAPH_NODE_TYPE_", "").lower()))
        except Exception as e:  # noqa: BLE001 - one unreadable node does not hide the others
            notes.append(f"node {index} ({getattr(t, 'name', t)}) could not be read: {e}")
            out.append(Node(index=index, type="unread"))
    return GraphRead(out, notes, time.perf_counter() - t0)

"""FlashInfer's paged attention wrappers, driven the way serving engines drive them under CUDA graphs.

:class:`FlashInferTarget` is the base class: one float workspace and the index buffers allocated in
``setup()`` for the spec's maximum; one wrapper per graph size (``batch.num_slots``), in CUDA-graph
mode with slices of those buffers (vLLM's layout), made on first use; ``plan()`` in ``prepare()``;
the new tokens' keys and values written into the paged cache, then ``run()``, in ``forward()``.  The
eager reference is the same class on the unpadded batch, so it plans and runs the same wrapper kind
at the batch's own size.  Subclasses choose the wrapper (:class:`Decode`, :class:`Prefill`,
:class:`MLA`); a backend author overrides what their engine does differently: the class attributes
(``library``, head counts, ``dtype``, ``wrapper_kwargs``, ``plan_kwargs``, ``use_cuda_graph``) or the
methods ``make_workspace``, ``make_wrapper``, ``plan`` (the padding rule lives in ``layout``) and ``run``.

Inside ``forward()`` the wrapper's kernel calls are recorded through :func:`~graphsafe.flashinfer.watch`,
so that a freed or rebound buffer, or a plan value the graph froze, is named like a Triton argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..contract import Batch, CaptureSpec, Support, Target
from ..values import derive_seed, seeded
from .library import load, submodule
from .watch import watch

__all__ = ["FlashInferTarget", "Decode", "Prefill", "MLA", "Layout"]


@dataclass
class Layout:
    """A step's metadata as host tensors, in the wrapper's fixed batch layout (padded requests included):
    what ``plan()`` takes, and the cache slot of every token row ``forward()`` writes."""

    qo_indptr: torch.Tensor  # [requests + 1] query rows per request (cumulative)
    kv_indptr: torch.Tensor  # [requests + 1] pages per request (cumulative)
    kv_indices: torch.Tensor  # [pages] page ids
    last_page_len: torch.Tensor  # [requests] tokens in each request's last page
    kv_len: torch.Tensor  # [requests] KV length of each request
    slots: torch.Tensor  # [rows] cache slot of each token row; the trash slot for padded rows
    rows: int  # token rows the run covers (the query's first dimension)


class FlashInferTarget(Target):
    """A FlashInfer wrapper captured as an engine captures it (see the module docstring).

    Override points, with their defaults:

    * ``library``: ``"flashinfer"`` (imported in ``setup()``), ``"standin"`` (the CPU stand-in) or a module;
    * ``use_cuda_graph`` (True), ``wrapper_kwargs`` (extra constructor arguments: ``backend``,
      ``use_tensor_cores``), ``plan_kwargs`` (extra ``plan()`` arguments: ``fixed_split_size``,
      ``disable_split_kv``), ``num_qo_heads``, ``num_kv_heads``, ``head_dim``, ``dtype``, ``workspace_mib``;
    * ``make_workspace()``, ``make_wrapper(size)``, ``layout(batch)`` (the padding rule), ``plan(wrapper,
      layout)``, ``run(wrapper, rows)``.

    Example::

        class MyDecode(graphsafe.flashinfer.Decode):
            plan_kwargs = {"disable_split_kv": True}   # what my engine passes

        graphsafe.check(MyDecode, engine="cuda")
    """

    library: ClassVar[Any] = "flashinfer"
    use_cuda_graph: ClassVar[bool] = True
    wrapper_kwargs: ClassVar[dict] = {}
    plan_kwargs: ClassVar[dict] = {}
    num_qo_heads: ClassVar[int] = 8
    num_kv_heads: ClassVar[int] = 2
    head_dim: ClassVar[int] = 128
    dtype: ClassVar[torch.dtype] = torch.bfloat16
    workspace_mib: ClassVar[int] = 32
    #: token rows a graph of ``size`` request slots covers, per slot (decode: 1)
    extra_requests: ClassVar[int] = 0  # fixed-batch slots past the graph's (a padding request)

    # -- set-up ---------------------------------------------------------------------------
    def setup(self, spec: CaptureSpec, device) -> None:
        self.lib = load(self.library)
        self.spec, self.device = spec, torch.device(device)
        self.max_rows = self.rows_for(spec.max_reqs)
        self.max_pages = spec.max_reqs * spec.blocks_per_seq + math.ceil(self.max_rows / spec.block_size) + 1
        reqs = spec.max_reqs + self.extra_requests
        i32: dict[str, Any] = dict(dtype=torch.int32, device=self.device)
        self.qo_indptr = torch.zeros(reqs + 1, **i32)
        self.kv_indptr = torch.zeros(reqs + 1, **i32)
        self.kv_indices = torch.zeros(self.max_pages, **i32)
        self.last_page_len = torch.zeros(reqs, **i32)
        self.kv_len = torch.zeros(reqs, **i32)
        self.slot_mapping = torch.zeros(self.max_rows, dtype=torch.int64, device=self.device)
        self.make_tensors(spec)
        self.workspace = self.make_workspace()
        self.wrappers: dict[int, Any] = {}
        self.active: Any = None
        self.rows = 0

    def make_tensors(self, spec: CaptureSpec) -> None:
        """The paged caches (static, with one trash row past the last block that padded rows write into),
        the query, the new tokens' cache rows and the output."""
        blocks, bs, rows = spec.num_blocks, spec.block_size, self.max_rows
        kv: dict[str, Any] = dict(dtype=self.dtype, device=self.device)
        self.k_store = torch.zeros(blocks * bs + 1, self.num_kv_heads, self.head_dim, **kv)
        self.v_store = torch.zeros(blocks * bs + 1, self.num_kv_heads, self.head_dim, **kv)
        self.k_cache = self.k_store[:-1].view(blocks, bs, self.num_kv_heads, self.head_dim)
        self.v_cache = self.v_store[:-1].view(blocks, bs, self.num_kv_heads, self.head_dim)
        self.q = torch.zeros(rows, self.num_qo_heads, self.head_dim, **kv)
        self.k_new = torch.zeros(rows, self.num_kv_heads, self.head_dim, **kv)
        self.v_new = torch.zeros(rows, self.num_kv_heads, self.head_dim, **kv)
        self.out = torch.zeros(rows, self.num_qo_heads, self.head_dim, **kv)

    def static(self) -> dict[str, torch.Tensor]:
        return {"k_cache": self.k_cache, "v_cache": self.v_cache}

    def make_workspace(self) -> torch.Tensor:
        """The float workspace every wrapper of this backend shares (FlashInfer: zero-initialised)."""
        return torch.zeros(self.workspace_mib << 20, dtype=torch.uint8, device=self.device)

    def rows_for(self, size: int) -> int:
        """Token rows a graph of ``size`` request slots covers."""
        return size * self.spec.max_query_len

    # -- per step -------------------------------------------------------------------------
    def wrapper_for(self, size: int) -> Any:
        """The wrapper serving graphs of ``size`` request slots, made on first use."""
        w = self.wrappers.get(size)
        if w is None:
            w = self.wrappers[size] = self.make_wrapper(size)
        return w

    def prepare(self, batch: Batch) -> None:
        size = batch.num_slots
        wrapper = self.wrapper_for(size)
        lay = self.layout(batch)
        self.write_tokens(batch, lay)
        self.plan(wrapper, lay)
        self.active, self.rows = wrapper, lay.rows

    def forward(self) -> torch.Tensor:
        n = self.rows
        self.write_kv(n)
        with watch(self.active):
            self.run(self.active, n)
        return self.out  # the whole buffer: live() takes the live tokens' rows, wherever the run stopped

    def write_tokens(self, batch: Batch, lay: Layout) -> None:
        """The live tokens' queries and new keys and values (seeded by the batch), zeros past them, and every
        row's cache slot."""
        n = batch.num_tokens
        for name, t in self.token_inputs().items():
            t[:n].copy_(seeded((n, *t.shape[1:]), seed=derive_seed(batch.seed, name), device=self.device))
            t[n:].zero_()
        self.slot_mapping[: lay.rows].copy_(lay.slots)
        self.slot_mapping[lay.rows :].fill_(self.trash_slot)

    def token_inputs(self) -> dict[str, torch.Tensor]:
        """The per-token inputs ``prepare()`` writes (seeded per name)."""
        return {"q": self.q, "k_new": self.k_new, "v_new": self.v_new}

    def write_kv(self, rows: int) -> None:
        """Write the new tokens' keys and values into the paged cache (padded rows into the trash row)."""
        idx = self.slot_mapping[:rows]
        self.k_store.index_copy_(0, idx, self.k_new[:rows])
        self.v_store.index_copy_(0, idx, self.v_new[:rows])

    @property
    def trash_slot(self) -> int:
        return self.spec.num_blocks * self.spec.block_size

    # -- the padding rule --------------------------------------------------------------------
    def layout(self, batch: Batch) -> Layout:
        """Each live request: its query rows, its pages and its new tokens' slots.  Padded requests: one
        query row each where ``per_slot_rows`` says so, no pages, ``last_page_len`` 1 (vLLM's rule); rows
        past the live tokens write into the trash slot."""
        bs = self.spec.block_size
        qo, kv, idx, last, lens, slots = [0], [0], [], [], [], []
        for q, s, table in zip(batch.query_lens, batch.seq_lens, batch.block_table):
            pages = list(table[: math.ceil(s / bs)])
            qo.append(qo[-1] + q)
            kv.append(kv[-1] + len(pages))
            idx += pages
            last.append(s - (len(pages) - 1) * bs)
            lens.append(s)
            slots += [pages[p // bs] * bs + p % bs for p in range(s - q, s)]
        for _ in range(batch.num_slots - batch.num_reqs):
            qo.append(qo[-1] + self.padded_request_rows)
            kv.append(kv[-1])
            last.append(1)
            lens.append(0)
        rows = self.rows_for(batch.num_slots) if self.padded_request_rows else qo[-1]
        slots += [self.trash_slot] * (rows - len(slots))
        return self._layout(qo, kv, idx, last, lens, slots, rows)

    #: query rows a padded request slot keeps (decode: 1, its row of the fixed batch)
    padded_request_rows: ClassVar[int] = 1

    @staticmethod
    def _layout(qo, kv, idx, last, lens, slots, rows) -> Layout:
        i32: dict[str, Any] = dict(dtype=torch.int32)
        return Layout(
            torch.tensor(qo, **i32),
            torch.tensor(kv, **i32),
            torch.tensor(idx or [0], **i32)[: len(idx)],
            torch.tensor(last, **i32),
            torch.tensor(lens, **i32),
            torch.tensor(slots, dtype=torch.int64),
            rows,
        )

    # -- the wrapper (subclasses) ------------------------------------------------------------
    def make_wrapper(self, size: int) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def plan(self, wrapper: Any, lay: Layout) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def run(self, wrapper: Any, rows: int) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class Decode(FlashInferTarget):
    """Safe: ``BatchDecodeWithPagedKVCacheWrapper`` in CUDA-graph mode, one wrapper per graph size on slices of
    fixed index buffers (paged KV, GQA: 8 query heads on 2 KV heads, one query token per request)."""

    name = "flashinfer:decode"
    WRAPPER: ClassVar[str] = "BatchDecodeWithPagedKVCacheWrapper"
    expected: ClassVar[str | None] = None
    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = CaptureSpec(max_reqs=8, max_query_len=1, max_seq_len=256, block_size=16)

    def make_wrapper(self, size: int) -> Any:
        extra = (
            dict(
                paged_kv_indptr_buffer=self.kv_indptr[: size + 1],
                paged_kv_indices_buffer=self.kv_indices,
                paged_kv_last_page_len_buffer=self.last_page_len[:size],
            )
            if self.use_cuda_graph
            else {}
        )
        return self.lib.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=self.use_cuda_graph, **extra, **self.wrapper_kwargs
        )

    def plan(self, wrapper: Any, lay: Layout) -> None:
        wrapper.plan(
            lay.kv_indptr,
            lay.kv_indices,
            lay.last_page_len,
            self.num_qo_heads,
            self.num_kv_heads,
            self.head_dim,
            self.spec.block_size,
            q_data_type=self.dtype,
            kv_data_type=self.dtype,
            **self.plan_kwargs,
        )

    def run(self, wrapper: Any, rows: int) -> torch.Tensor:
        return wrapper.run(self.q[:rows], (self.k_cache, self.v_cache), out=self.out[:rows])


class Prefill(FlashInferTarget):
    """Safe: ``BatchPrefillWithPagedKVCacheWrapper`` in CUDA-graph mode, ragged query lengths, causal,
    prefill and decode mixed.  A graph's query covers ``size * max_query_len`` rows; FlashInfer's CUDA-graph mode fixes the
    total at the first plan and its ``run()`` wants ``q.shape[0] == qo_indptr[-1]``, so one padding
    request past the graph's slots takes the rows the live requests leave (its keys: the null block 0)."""

    name = "flashinfer:prefill"
    WRAPPER: ClassVar[str] = "BatchPrefillWithPagedKVCacheWrapper"
    expected: ClassVar[str | None] = None
    support = Support.ALWAYS
    default_spec = CaptureSpec(max_reqs=4, max_query_len=8, max_seq_len=128, block_size=16)
    extra_requests = 1
    padded_request_rows = 0

    def make_wrapper(self, size: int) -> Any:
        n = size + self.extra_requests
        extra = (
            dict(
                qo_indptr_buf=self.qo_indptr[: n + 1],
                paged_kv_indptr_buf=self.kv_indptr[: n + 1],
                paged_kv_indices_buf=self.kv_indices,
                paged_kv_last_page_len_buf=self.last_page_len[:n],
            )
            if self.use_cuda_graph
            else {}
        )
        return self.lib.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=self.use_cuda_graph, **extra, **self.wrapper_kwargs
        )

    def layout(self, batch: Batch) -> Layout:
        lay = super().layout(batch)
        rows = self.rows_for(batch.num_slots)
        spare = rows - batch.num_tokens  # the padding request: the spare rows attend over the null block
        pages = math.ceil(spare / self.spec.block_size)
        qo = lay.qo_indptr.tolist() + [rows]
        kv = lay.kv_indptr.tolist() + [lay.kv_indptr[-1].item() + pages]
        idx = lay.kv_indices.tolist() + [0] * pages
        last = lay.last_page_len.tolist() + [spare - (pages - 1) * self.spec.block_size if pages else 1]
        lens = lay.kv_len.tolist() + [spare]
        return self._layout(qo, kv, idx, last, lens, lay.slots.tolist() + [self.trash_slot] * (rows - lay.rows), rows)

    def plan(self, wrapper: Any, lay: Layout) -> None:
        wrapper.plan(
            lay.qo_indptr,
            lay.kv_indptr,
            lay.kv_indices,
            lay.last_page_len,
            self.num_qo_heads,
            self.num_kv_heads,
            self.head_dim,
            self.spec.block_size,
            causal=True,
            q_data_type=self.dtype,
            kv_data_type=self.dtype,
            **self.plan_kwargs,
        )

    def run(self, wrapper: Any, rows: int) -> torch.Tensor:
        return wrapper.run(self.q[:rows], (self.k_cache, self.v_cache), out=self.out[:rows])


class MLA(FlashInferTarget):
    """Safe: ``mla.BatchMLAPagedAttentionWrapper`` in CUDA-graph mode, one query token per request (FlashInfer's
    graph plans keep query offsets and lengths fixed).  DeepSeek's absorbed MLA: a compressed KV cache (512)
    and a RoPE part (64), 16 heads; padded requests keep their query row and get no KV."""

    name = "flashinfer:mla"
    WRAPPER: ClassVar[str] = "mla.BatchMLAPagedAttentionWrapper"
    expected: ClassVar[str | None] = None
    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    default_spec = CaptureSpec(max_reqs=8, max_query_len=1, max_seq_len=256, block_size=16)
    num_qo_heads = 16
    head_dim = 512  # the compressed KV's width (head_dim_ckv)
    head_dim_kpe: ClassVar[int] = 64
    wrapper_kwargs: ClassVar[dict] = {"backend": "fa2"}

    def make_tensors(self, spec: CaptureSpec) -> None:
        blocks, bs, rows = spec.num_blocks, spec.block_size, self.max_rows
        kv: dict[str, Any] = dict(dtype=self.dtype, device=self.device)
        self.ckv_store = torch.zeros(blocks * bs + 1, self.head_dim, **kv)
        self.kpe_store = torch.zeros(blocks * bs + 1, self.head_dim_kpe, **kv)
        self.ckv_cache = self.ckv_store[:-1].view(blocks, bs, self.head_dim)
        self.kpe_cache = self.kpe_store[:-1].view(blocks, bs, self.head_dim_kpe)
        self.q_nope = torch.zeros(rows, self.num_qo_heads, self.head_dim, **kv)
        self.q_pe = torch.zeros(rows, self.num_qo_heads, self.head_dim_kpe, **kv)
        self.ckv_new = torch.zeros(rows, self.head_dim, **kv)
        self.kpe_new = torch.zeros(rows, self.head_dim_kpe, **kv)
        self.out = torch.zeros(rows, self.num_qo_heads, self.head_dim, **kv)

    def static(self) -> dict[str, torch.Tensor]:
        return {"ckv_cache": self.ckv_cache, "kpe_cache": self.kpe_cache}

    def token_inputs(self) -> dict[str, torch.Tensor]:
        return {"q_nope": self.q_nope, "q_pe": self.q_pe, "ckv_new": self.ckv_new, "kpe_new": self.kpe_new}

    def write_kv(self, rows: int) -> None:
        idx = self.slot_mapping[:rows]
        self.ckv_store.index_copy_(0, idx, self.ckv_new[:rows])
        self.kpe_store.index_copy_(0, idx, self.kpe_new[:rows])

    def make_wrapper(self, size: int) -> Any:
        extra = (
            dict(
                qo_indptr=self.qo_indptr[: size + 1],
                kv_indptr=self.kv_indptr[: size + 1],
                kv_indices=self.kv_indices,
                kv_len_arr=self.kv_len[:size],
            )
            if self.use_cuda_graph
            else {}
        )
        return submodule(self.lib, "mla").BatchMLAPagedAttentionWrapper(
            self.workspace, use_cuda_graph=self.use_cuda_graph, **extra, **self.wrapper_kwargs
        )

    def plan(self, wrapper: Any, lay: Layout) -> None:
        meta = submodule(self.lib, "mla").MLAPlanMetadata.csr(
            lay.qo_indptr.to(self.device),
            lay.kv_indptr.to(self.device),
            lay.kv_indices.to(self.device),
            lay.kv_len.to(self.device),
        )
        wrapper.plan(
            metadata=meta,
            num_heads=self.num_qo_heads,
            head_dim_ckv=self.head_dim,
            head_dim_kpe=self.head_dim_kpe,
            page_size=self.spec.block_size,
            causal=self.spec.max_query_len > 1,
            sm_scale=1.0 / math.sqrt(128 + self.head_dim_kpe),
            q_data_type=self.dtype,
            kv_data_type=self.dtype,
            query_layout="split",
            kv_cache_layout="split",
            **self.plan_kwargs,
        )

    def run(self, wrapper: Any, rows: int) -> torch.Tensor:
        return wrapper.run(
            query=(self.q_nope[:rows], self.q_pe[:rows]), kv_cache=(self.ckv_cache, self.kpe_cache), out=self.out[:rows]
        )

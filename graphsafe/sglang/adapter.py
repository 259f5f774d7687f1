"""The adapter: an SGLang attention backend driven the way SGLang's decode CUDA-graph runner drives it.

:class:`SglangTarget` builds the backend with a model-runner stand-in (SGLang's request-to-token table and
``MHATokenToKVPool``, sized for the spec), calls ``init_cuda_graph_state(max_bs, max_num_tokens)`` and keeps
the runner's static input buffers (request indices, sequence lengths on the host and the device, cache
locations, positions), padded rows holding ``get_cuda_graph_seq_len_fill_value()`` on the pad request 0 and
the pad slot 0.  As the runner does:

* ``prepare_capture()``: the capture batch into the static buffers, a ``ForwardBatch`` over them, and
  ``init_forward_metadata_out_graph(fb, in_capture=True)``; the warm-ups and the capture that follow run
  ``forward()`` under SGLang's capture mode;
* ``prepare()`` on an instance that was captured: the scheduler's batch copied into the static buffers,
  SGLang's replay view built over them, ``init_forward_metadata_out_graph(view)`` (the backend's
  ``forward_metadata`` first set back to the one this graph size was captured with, so that an eager
  ``forward()`` on this instance reads what the graph reads);
* ``forward()``, the captured region: ``init_forward_metadata_in_graph(fb)`` and ``forward_decode``
  (the new token's key and value written into the KV pool, then attention).

The eager reference is the backend's own eager path on a fresh instance: ``init_forward_metadata(fb)`` over
the batch, then ``forward_decode``.  Decode only: one query token per request (``UNIFORM_SINGLE_TOKEN_DECODE``).
``backend_mixins`` puts classes in front of the backend's class (graphsafe's deliberate mistakes do).
"""

from __future__ import annotations

import contextlib
import math
from types import SimpleNamespace
from typing import Any, ClassVar

import torch

from ..contract import Batch, CaptureSpec, Support, Target
from ..errors import ContractError
from ..family import with_mixins
from ..values import derive_seed, seeded
from .library import FAMILY, load

__all__ = ["SglangTarget"]


class SglangTarget(Target):
    """An SGLang attention backend under graphsafe (see the module docstring).

    Override points, with their defaults:

    * ``backend``: ``"triton"``, ``"flashinfer"``, an ``AttentionBackend`` class or ``"module:Class"``;
    * ``library``: ``"sglang"`` (imported in ``setup()``), ``"standin"`` (the CPU stand-in) or a module;
    * ``num_heads`` (8), ``num_kv_heads`` (2), ``head_dim`` (128), ``dtype`` (bfloat16);
    * ``backend_mixins``: classes put in front of the backend's class.

    Example::

        class MyBackend(graphsafe.sglang.SglangTarget):
            backend = "my_fork.attention:MyAttnBackend"

        graphsafe.check(MyBackend, engine="cuda")
    """

    library: ClassVar[Any] = "sglang"
    backend: ClassVar[Any] = None
    backend_mixins: ClassVar[tuple[type, ...]] = ()
    num_heads: ClassVar[int] = 8
    num_kv_heads: ClassVar[int] = 2
    head_dim: ClassVar[int] = 128
    dtype: ClassVar[torch.dtype] = torch.bfloat16
    support = Support.UNIFORM_SINGLE_TOKEN_DECODE
    #: modules the fork server imports once for every sandbox child (SGLang takes seconds to import)
    preload: ClassVar[tuple[str, ...]] = FAMILY.preload
    #: how SGLang's runner captures (the check's default capture policy for this target)
    engine_capture: ClassVar[str | None] = FAMILY.capture
    #: the finding kind graphsafe must report (None: none)
    expected: ClassVar[str | None] = None
    default_spec = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=128, block_size=16)

    @classmethod
    def backend_cls(cls, lib: Any) -> type[Any]:
        if cls.backend is None:
            raise ContractError(f"{cls.__qualname__}.backend is not set: name an SGLang attention backend")
        return with_mixins(tuple(cls.backend_mixins), lib.backend_class(cls.backend))

    # -- set-up ---------------------------------------------------------------------------
    def setup(self, spec: CaptureSpec, device) -> None:
        self.sg = load(self.library)
        self.spec, self.device = spec, torch.device(device)
        name = self.backend if isinstance(self.backend, str) and ":" not in self.backend else "triton"
        self.runner = self.sg.make_runner(
            name,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            page_size=spec.block_size,
            max_reqs=spec.max_reqs,
            max_context_len=spec.max_seq_len,
            pool_size=spec.num_blocks * spec.block_size,
            dtype=self.dtype,
            device=self.device,
        )
        self.backend_obj = self.backend_cls(self.sg)(self.runner)
        self.layer = self.sg.RadixAttention(
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            scaling=self.head_dim**-0.5,
            num_kv_heads=self.num_kv_heads,
            layer_id=0,
        )
        n, dev, i32, i64 = spec.max_reqs, self.device, torch.int32, torch.int64
        self.fill = int(self.backend_obj.get_cuda_graph_seq_len_fill_value())
        self.buffers = SimpleNamespace(  # the runner's static inputs (SGLang's DecodeInputBuffers)
            input_ids=torch.zeros(n, dtype=i64, device=dev),
            positions=torch.zeros(n, dtype=i64, device=dev),
            req_pool_indices=torch.zeros(n, dtype=i32, device=dev),
            seq_lens=torch.full((n,), self.fill, dtype=i32, device=dev),
            seq_lens_cpu=torch.full((n,), self.fill, dtype=i32),
            out_cache_loc=torch.zeros(n, dtype=i64, device=dev),
            encoder_lens=None,
            mamba_track_indices=None,
        )
        h, hk, d, dt = self.num_heads, self.num_kv_heads, self.head_dim, self.dtype
        self.q = torch.zeros(n, h * d, dtype=dt, device=dev)
        self.k = torch.zeros(n, hk, d, dtype=dt, device=dev)
        self.v = torch.zeros(n, hk, d, dtype=dt, device=dev)
        self.backend_obj.init_cuda_graph_state(n, n)
        self.graph_batches: dict[int, Any] = {}  # one ForwardBatch over the static buffers per graph size
        self.graph_metadata: dict[int, Any] = {}  # the backend's metadata each graph size was captured with
        self.captured = False
        self.mode, self.fb, self.rows = "eager", None, 0

    def static(self) -> dict[str, torch.Tensor]:
        """The KV pool past its first page: slot 0, where SGLang's padded rows write, is in that page (graphsafe's
        null block 0, which no live request uses)."""
        pool, page = self.runner.token_to_kv_pool, self.spec.block_size
        return {"k_cache": pool.get_key_buffer(0)[page:], "v_cache": pool.get_value_buffer(0)[page:]}

    # -- per step -------------------------------------------------------------------------
    def _requests(self, batch: Batch) -> tuple[list[int], list[int], list[int]]:
        """Write the batch's requests into the request-to-token table (request slot ``i`` is SGLang's request
        ``i + 1``: request 0 is where padded rows point); their request indices, lengths and new-token slots."""
        if any(q != 1 for q in batch.query_lens):
            raise ContractError(
                f"SGLang decode graphs take one token per request, got query lengths {batch.query_lens}"
            )
        bs, table = self.spec.block_size, self.runner.req_to_token_pool.req_to_token
        reqs, lens, locs = [], [], []
        for i, (s, blocks) in enumerate(zip(batch.seq_lens, batch.block_table)):
            live = blocks[: math.ceil(s / bs)]
            slots = torch.tensor([live[p // bs] * bs + p % bs for p in range(s)], dtype=table.dtype)
            table[i + 1, :s].copy_(slots)
            reqs.append(i + 1)
            lens.append(s)
            locs.append(int(slots[-1]))
        return reqs, lens, locs

    def _inputs(self, batch: Batch, rows: int) -> None:
        tokens = batch.num_tokens
        for name, t in (("q", self.q), ("k", self.k), ("v", self.v)):
            t[:tokens].copy_(seeded((tokens, *t.shape[1:]), seed=derive_seed(batch.seed, name), device=self.device))
            t[tokens:].zero_()

    def _fields(self, reqs: list[int], lens: list[int], locs: list[int], rows: int) -> dict[str, Any]:
        """A batch's ``ForwardBatch`` fields, padded to ``rows`` as the runner pads (fresh tensors)."""
        pad = rows - len(reqs)
        dev = self.device
        seq = torch.tensor(lens + [self.fill] * pad, dtype=torch.int32)
        return {
            "batch_size": rows,
            "input_ids": torch.zeros(rows, dtype=torch.int64, device=dev),
            "req_pool_indices": torch.tensor(reqs + [0] * pad, dtype=torch.int32, device=dev),
            "seq_lens": seq.to(dev),
            "seq_lens_cpu": seq,
            "out_cache_loc": torch.tensor(locs + [0] * pad, dtype=torch.int64, device=dev),
            "seq_lens_sum": int(seq.sum()),
            "positions": (seq - 1).clamp(min=0).to(torch.int64).to(dev),
        }

    def _load(self, fields: dict[str, Any], rows: int) -> None:
        """Copy a batch into the static buffers (the runner's replay preparation)."""
        b = self.buffers
        for name in ("input_ids", "positions", "req_pool_indices", "seq_lens", "seq_lens_cpu", "out_cache_loc"):
            getattr(b, name)[:rows].copy_(fields[name])

    def _graph_batch(self, rows: int) -> Any:
        fb = self.graph_batches.get(rows)
        if fb is None:
            b = self.buffers
            fields = {
                "batch_size": rows,
                "seq_lens_sum": int(b.seq_lens_cpu[:rows].sum()),
                **{n: getattr(b, n)[:rows] for n in ("input_ids", "positions", "req_pool_indices", "seq_lens")},
                "seq_lens_cpu": b.seq_lens_cpu[:rows],
                "out_cache_loc": b.out_cache_loc[:rows],
            }
            fb = self.graph_batches[rows] = self.sg.decode_batch(self.runner, fields, capture=True)
        else:
            fb.seq_lens_sum = int(self.buffers.seq_lens_cpu[:rows].sum())
        return fb

    def prepare_capture(self, batch: Batch) -> None:
        rows = batch.num_slots
        reqs, lens, locs = self._requests(batch)
        self._inputs(batch, rows)
        self._load(self._fields(reqs, lens, locs, rows), rows)
        fb = self._graph_batch(rows)
        with self.sg.capture_mode():  # (SGLang's runner prepares its captures inside the capture mode too)
            self.backend_obj.init_forward_metadata_out_graph(fb, in_capture=True)
        self.graph_metadata[rows] = self.backend_obj.forward_metadata
        self.captured, self.mode, self.fb, self.rows = True, "capture", fb, rows

    def prepare(self, batch: Batch) -> None:
        rows = batch.num_slots
        reqs, lens, locs = self._requests(batch)
        self._inputs(batch, rows)
        if not self.captured:  # the eager reference: the backend's own eager path, over fresh tensors
            fb = self.sg.decode_batch(self.runner, self._fields(reqs, lens, locs, rows), capture=False)
            if rows > len(reqs):
                fb.num_padding = rows - len(reqs)  # (as SGLang's replay view says)
            with self.sg.forward_context(self.backend_obj, fb):
                self.backend_obj.init_forward_metadata(fb)
            self.mode, self.fb, self.rows = "eager", fb, rows
            return
        scheduled = self.sg.decode_batch(self.runner, self._fields(reqs, lens, locs, len(reqs)), capture=False)
        self._load(self._fields(reqs, lens, locs, rows), rows)
        view = self.sg.replay_view(scheduled, self.buffers, rows, len(reqs), self.fill)
        # the metadata this size's graph holds: what a replay reads (the backend's Python attribute holds the
        # last capture's, which only an eager forward() on this instance would read)
        self.backend_obj.forward_metadata = self.graph_metadata.get(rows, self.backend_obj.forward_metadata)
        self.backend_obj.init_forward_metadata_out_graph(view)
        self.mode, self.fb, self.rows = "replay", self._graph_batch(rows), rows

    def forward(self):
        rows, fb, be = self.rows, self.fb, self.backend_obj
        capturing = self.sg.capture_mode() if self.mode == "capture" else contextlib.nullcontext()
        with capturing, self.sg.forward_context(be, fb):
            if self.mode != "eager":
                be.init_forward_metadata_in_graph(fb)
            return be.forward_decode(self.q[:rows], self.k[:rows], self.v[:rows], self.layer, fb)

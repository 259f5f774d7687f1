"""The adapter: a vLLM attention backend driven the way vLLM's GPU model runner drives it.

:class:`VllmTarget` keeps the runner's persistent input buffers, sized for the spec (query start
locations and sequence lengths on the host and the device, the block table, the slot mapping, the
token inputs and the output).  ``prepare()`` writes a step into them, builds vLLM's
``CommonAttentionMetadata`` over views of them and calls the backend's metadata builder on the host;
``prepare_capture()`` does what the runner does for a capture instead (``build_for_cudagraph_capture()``,
``max_seq_len`` the model's maximum).  ``forward()``, the captured region, writes the new tokens into the
KV cache and runs the backend's attention impl.  The eager reference is the same backend, fresh.

A graph of ``size`` request slots holds ``size * q`` token rows (``q``: 1 for single-token decode, the
uniform query length for ``UNIFORM_BATCH``, ``max_query_len`` for ``ALWAYS``), as the runner pads a
FULL graph's tokens: padded requests get query length 0, sequence length 0 and the null block 0, padded
token rows the slot -1 (no cache write).  The support level comes from the builder class
(``get_cudagraph_support()``), read where the check runs.  Subclasses (:mod:`graphsafe.vllm.kinds`) say
what the impl is given; ``builder_mixins`` and ``impl_mixins`` put classes in front of the backend's
builder and impl (graphsafe's deliberate mistakes do).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import torch

from ..capture.policies import capture_query_len
from ..contract import Batch, CaptureSpec, Support, Target
from ..errors import ContractError
from ..family import with_mixins
from ..values import derive_seed, seeded
from .library import FAMILY, load
from .signatures import kwargs_for

__all__ = ["VllmTarget", "FromBuilder", "MODELS", "kwargs_for"]

#: graphsafe's tiny model configs (Hugging Face config.json only): ``llama`` (8 query heads on 2 KV heads
#: of 128) and ``deepseek_v3`` (MLA: 16 heads, a 512-wide latent and a 64-wide RoPE part)
MODELS = {name: str(Path(__file__).with_name("models") / name) for name in ("llama", "deepseek_v3")}


class FromBuilder:
    """A vLLM target's ``support``: its builder class's ``get_cudagraph_support()``, read where the check
    runs (in a sandbox child: the process that schedules checks does not import vLLM for it)."""

    resolved_when_checked = True
    describe = "the builder's level"

    def __init__(self) -> None:
        self._levels: dict[type, Support] = {}

    def __get__(self, obj: Any, owner: type[VllmTarget] | None = None) -> Support:
        cls = owner if owner is not None else type(obj)
        level = self._levels.get(cls)
        if level is None:
            level = self._levels[cls] = cls.builder_support()
        return level


class VllmTarget(Target):
    """A vLLM attention backend under graphsafe (see the module docstring).

    Override points, with their defaults:

    * ``backend``: the backend: a registry name (``"TRITON_ATTN"``), an ``AttentionBackend`` class or
      ``"module:Class"``;
    * ``library``: ``"vllm"`` (imported in ``setup()``), ``"standin"`` (the CPU stand-in) or a module;
    * ``model``: a directory with a Hugging Face ``config.json`` (default: graphsafe's tiny one for the kind),
      ``dtype`` (bfloat16);
    * ``builder_mixins``, ``impl_mixins``: classes put in front of the backend's builder and impl;
    * ``make_impl()``, ``make_layer()``, ``make_tensors()``, ``write_cache()``, ``attend()`` (the kind's).

    Example::

        class MyBackend(graphsafe.vllm.AttentionTarget):
            backend = "my_fork.attention:MyAttentionBackend"

        graphsafe.check(MyBackend, engine="cuda")
    """

    library: ClassVar[Any] = "vllm"
    backend: ClassVar[Any] = None
    model: ClassVar[str | None] = None
    model_kind: ClassVar[str] = "llama"
    dtype: ClassVar[torch.dtype] = torch.bfloat16
    support = FromBuilder()
    #: modules the fork server imports once for every sandbox child (vLLM takes seconds to import)
    preload: ClassVar[tuple[str, ...]] = ("graphsafe.vllm.preload",)
    #: how vLLM's runner captures (the check's default capture policy for this target)
    engine_capture: ClassVar[str | None] = FAMILY.capture
    builder_mixins: ClassVar[tuple[type, ...]] = ()
    impl_mixins: ClassVar[tuple[type, ...]] = ()
    mla: ClassVar[bool] = False
    #: the finding kind graphsafe must report (None: none)
    expected: ClassVar[str | None] = None
    default_spec = CaptureSpec(max_reqs=4, max_query_len=4, max_seq_len=128, block_size=16)

    # -- the backend's classes ------------------------------------------------------------
    @classmethod
    def backend_cls(cls, lib: Any) -> type[Any]:
        if cls.backend is None:
            raise ContractError(f"{cls.__qualname__}.backend is not set: name a vLLM attention backend")
        return lib.backend_class(cls.backend)

    @classmethod
    def builder_cls(cls, lib: Any) -> type[Any]:
        return with_mixins(tuple(cls.builder_mixins), cls.backend_cls(lib).get_builder_cls())

    @classmethod
    def impl_cls(cls, lib: Any) -> type[Any]:
        return with_mixins(tuple(cls.impl_mixins), cls.backend_cls(lib).get_impl_cls())

    @classmethod
    def builder_support(cls) -> Support:
        """The builder class's CUDA-graph support level for the default spec, as a graphsafe level."""
        lib = load(cls.library)
        spec = cls.default_spec or CaptureSpec()
        config = cls.config_for(lib, spec, 0, torch.device("cpu"))
        level = cls.builder_cls(lib).get_cudagraph_support(config, cls.kv_spec_for(lib, config, spec))
        return Support(int(level.value))

    @classmethod
    def config_for(
        cls, lib: Any, spec: CaptureSpec, speculative_tokens: int, device: torch.device, rows_per_slot: int = 1
    ) -> Any:
        """vLLM's config for ``spec``: FULL graphs at the spec's capture sizes, in token rows (``rows_per_slot``
        rows per request slot, as graphsafe's graphs hold).  vLLM sizes per-batch scratch from these sizes (the
        split-KV partials of TRITON_ATTN hold as many token rows as the 3D kernel's threshold, a capture size):
        sizes in slots where a graph holds several rows per slot leave that scratch too small for the graph."""
        return lib.make_config(
            cls.model or MODELS[cls.model_kind],
            dtype=cls.dtype,
            max_model_len=spec.max_seq_len,
            max_num_seqs=spec.max_reqs,
            max_num_batched_tokens=max(spec.max_reqs * spec.max_query_len, spec.max_seq_len),
            block_size=spec.block_size,
            num_blocks=spec.num_blocks,
            capture_sizes=tuple(s * max(1, rows_per_slot) for s in spec.default_capture_sizes()),
            speculative_tokens=speculative_tokens,
            device=device,
        )

    @classmethod
    def kv_spec_for(cls, lib: Any, config: Any, spec: CaptureSpec) -> Any:
        dims = cls.dims(config)
        return lib.kv_spec(
            mla=cls.mla,
            block_size=spec.block_size,
            num_kv_heads=1 if cls.mla else dims["num_kv_heads"],
            head_size=dims["head_size"],
            dtype=cls.dtype,
        )

    @staticmethod
    def dims(config: Any) -> dict[str, int]:
        mc, pc = config.model_config, config.parallel_config
        return {
            "num_heads": mc.get_num_attention_heads(pc),
            "num_kv_heads": mc.get_num_kv_heads(pc),
            "head_size": mc.get_head_size(),
        }

    # -- set-up ---------------------------------------------------------------------------
    def setup(self, spec: CaptureSpec, device) -> None:
        self.vl = load(self.library)
        self.spec, self.device = spec, torch.device(device)
        level = Support(type(self).support)
        self.query_rows = capture_query_len(level, spec)  # token rows per request slot of a graph
        self.max_rows = spec.max_reqs * self.query_rows
        speculative = self.query_rows - 1 if level == Support.UNIFORM_BATCH else 0
        self.config = self.config_for(self.vl, spec, speculative, self.device, rows_per_slot=self.query_rows)
        self.layer_name = f"graphsafe.{type(self).__name__}.{id(self):x}"
        with self.vl.using(self.config):
            self.layer = self.make_layer()
            self.config.compilation_config.static_forward_context[self.layer_name] = self.layer
            self.impl = self.make_impl()
            self.kv_cache_spec = self.kv_spec_for(self.vl, self.config, spec)
            self.builder = self.builder_cls(self.vl)(self.kv_cache_spec, [self.layer_name], self.config, self.device)
        i32, pin, dev = torch.int32, self.device.type == "cuda", self.device
        self.query_start_loc_cpu = torch.zeros(spec.max_reqs + 1, dtype=i32, pin_memory=pin)
        self.seq_lens_cpu = torch.zeros(spec.max_reqs, dtype=i32, pin_memory=pin)
        self.query_start_loc = torch.zeros(spec.max_reqs + 1, dtype=i32, device=dev)
        self.seq_lens = torch.zeros(spec.max_reqs, dtype=i32, device=dev)
        self.block_table = torch.zeros(spec.max_reqs, spec.blocks_per_seq, dtype=i32, device=dev)
        self.slot_mapping = torch.full((self.max_rows,), -1, dtype=torch.int64, device=self.device)
        self.make_tensors(spec)
        self.metadata: Any = None
        self.rows = 0
        self.runner_warmup()

    def make_layer(self) -> torch.nn.Module:
        """What vLLM's attention layer gives the impl and the builder: the quantisation scales (1)."""
        layer = torch.nn.Module()
        for n in ("q", "k", "v", "prob"):  # buffers, as vLLM's layer registers them (and graphsafe sees them)
            layer.register_buffer(f"_{n}_scale", torch.ones((), dtype=torch.float32, device=self.device))
            setattr(layer, f"_{n}_scale_float", 1.0)
        layer.register_buffer("_k_scale_cpu", torch.ones(()))
        layer.register_buffer("_v_scale_cpu", torch.ones(()))
        return layer

    def make_impl(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def make_tensors(self, spec: CaptureSpec) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def token_inputs(self) -> dict[str, torch.Tensor]:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- per step -------------------------------------------------------------------------
    def rows_for(self, size: int) -> int:
        """Token rows a graph of ``size`` request slots holds."""
        return size * self.query_rows

    def prepare(self, batch: Batch) -> None:
        self._prepare(batch, capture=False)

    def prepare_capture(self, batch: Batch) -> None:
        self._prepare(batch, capture=True)

    def _prepare(self, batch: Batch, capture: bool) -> None:
        size, tokens = batch.num_slots, batch.num_tokens
        rows = self.rows_for(size)
        if tokens > rows:
            raise ContractError(
                f"a batch of {tokens} tokens does not fit a graph of {size} slots x {self.query_rows} rows: "
                "the check drew a batch its support level does not allow"
            )
        for name, t in self.token_inputs().items():  # the live tokens' inputs (seeded), zeros past them
            t[:tokens].copy_(seeded((tokens, *t.shape[1:]), seed=derive_seed(batch.seed, name), device=self.device))
            t[tokens:].zero_()
        bs = self.spec.block_size
        table = torch.zeros_like(self.block_table, device="cpu")
        slots = torch.full((self.max_rows,), -1, dtype=torch.int64)
        row = 0
        for i, (q, s, blocks) in enumerate(zip(batch.query_lens, batch.seq_lens, batch.block_table)):
            live = blocks[: math.ceil(s / bs)]
            table[i, : len(live)] = torch.tensor(live, dtype=torch.int32)
            slots[row : row + q] = torch.tensor([live[p // bs] * bs + p % bs for p in range(s - q, s)])
            row += q
        self._load(list(batch.cu_query_lens), list(batch.seq_lens), table, slots)
        max_seq = self.spec.max_seq_len if capture else batch.max_seq_len
        common = self.common_metadata(size, rows, batch.max_query_len, max_seq)
        if capture:  # as the runner captures: the builder's capture path, the model's longest sequence
            self.metadata = self.builder.build_for_cudagraph_capture(common)
        else:
            self.metadata = self.builder.build(0, common)
        self.rows = rows

    def _load(self, cu: list[int], seq_lens: list[int], table: torch.Tensor, slots: torch.Tensor) -> None:
        """Write one step into the persistent buffers: request slots past ``seq_lens`` are padding (query
        length 0, sequence length 0)."""
        n = len(seq_lens)
        self.query_start_loc_cpu.copy_(torch.tensor(cu + [cu[-1]] * (self.spec.max_reqs + 1 - len(cu))))
        self.seq_lens_cpu.copy_(torch.tensor(seq_lens + [0] * (self.spec.max_reqs - n)))
        self.query_start_loc.copy_(self.query_start_loc_cpu)
        self.seq_lens.copy_(self.seq_lens_cpu)
        self.block_table.copy_(table)
        self.slot_mapping.copy_(slots)

    def runner_warmup(self) -> None:
        """What vLLM's model runner does before it serves a batch: its dummy runs (the profile run, then one
        per graph size, largest first) build metadata for batches whose every token row is live, on the null
        block 0, writing nothing into the cache.  One such build over all ``max_rows`` rows: a builder's
        persistent buffers then hold valid values past any later batch's live rows, where a backend may read
        them for padded rows (FLEX_ATTENTION's mask looks up each padded row's request in its persistent
        request-id buffer, which it allocates uninitialised).  Called by :meth:`setup`."""
        n, q = self.spec.max_reqs, self.query_rows
        table = torch.zeros_like(self.block_table, device="cpu")
        self._load([i * q for i in range(n + 1)], [q] * n, table, torch.full((self.max_rows,), -1, dtype=torch.int64))
        self.builder.build(0, self.common_metadata(n, self.max_rows, q, q))
        self.metadata, self.rows = None, 0

    def common_metadata(self, size: int, rows: int, max_query_len: int, max_seq_len: int) -> Any:
        """vLLM's ``CommonAttentionMetadata`` for this step, over views of the persistent buffers."""
        qsl_cpu, seq_cpu = self.query_start_loc_cpu[: size + 1], self.seq_lens_cpu[:size]
        computed = seq_cpu - (qsl_cpu[1:] - qsl_cpu[:-1])
        cls = self.vl.CommonAttentionMetadata
        return cls(
            **kwargs_for(
                cls,
                query_start_loc=self.query_start_loc[: size + 1],
                query_start_loc_cpu=qsl_cpu,
                seq_lens=self.seq_lens[:size],
                num_reqs=size,
                num_actual_tokens=rows,
                max_query_len=max_query_len,
                max_seq_len=max_seq_len,
                block_table_tensor=self.block_table[:size],
                slot_mapping=self.slot_mapping[:rows],
                causal=True,
                seq_lens_cpu_upper_bound=seq_cpu,
                _seq_lens_cpu=seq_cpu,
                _num_computed_tokens_cpu=computed,
            )
        )

    def forward(self):
        with self.vl.using(self.config):
            self.write_cache(self.rows)
            return self.attend(self.rows)

    def write_cache(self, rows: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def attend(self, rows: int):  # pragma: no cover - abstract
        raise NotImplementedError

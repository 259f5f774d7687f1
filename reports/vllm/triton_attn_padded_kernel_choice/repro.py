"""Standalone repro (torch and vLLM only): vLLM's TRITON_ATTN computes one decode request with another kernel
configuration when the batch is padded to more token rows, and both results are as close to an fp32 reference.

    python3 repro.py graphsafe|runner [--cpu]    # one case per process; the model config: tiny_llama/ beside it

The attention call picks its kernel on the host: the 3D split-KV kernel (16 segments, KV tile 16, then
``reduce_segments``) or the 2D one (KV tile 32).  vLLM 0.33.0 also falls back to 2D when the builder's split-KV
scratch (``softmax_segm_max``: one row per token, ``min(seq_threshold_3D, max_num_seqs)`` rows) has fewer rows
than the query, padded rows included.  The config here lists capture sizes 1, 2, 4 (scratch: 4 rows).

* ``graphsafe``: 4 token rows per request slot (a FULL graph of a backend whose builder says ALWAYS, padded to
  the longest query, as graphsafe's adapter does): alone 1 slot = 4 rows, padded 2 slots = 8 rows.
* ``runner``: 1 token row per slot, as vLLM's runner pads a single-token decode batch to a capture size:
  alone 1 row, padded 2 rows.

One live decode (sequence lengths 17, 77, 128) runs (i) alone and (ii) as the live row of 2 request slots whose
second is padding as vLLM's runner writes it (query length 0: ``query_start_loc`` repeats the token count;
sequence length 0; block-table row 0; slot -1 for the padded token rows), each eagerly and replayed from a FULL
graph captured at that many slots on single-token decodes.  The script prints which kernels each run launched
(for a replay: those the capture launched), how far the runs are apart, and each one's largest error against
an fp32 torch reference of the live request.  ``--cpu`` is a dry run (Triton's interpreter, fp32, no graph: the
replay is the capture metadata run over the step's buffers).  The last line starts ``SUMMARY``.
"""

from __future__ import annotations

import inspect
import os
import sys

import torch

os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import vllm  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    CompilationConfig,
    DeviceConfig,
    LoadConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VllmConfig,
    set_current_vllm_config,
)
from vllm.v1.attention.backend import CommonAttentionMetadata  # noqa: E402
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend  # noqa: E402
from vllm.v1.attention.ops import triton_unified_attention as tua  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402

WHICH = next((a for a in sys.argv[1:] if a in ("graphsafe", "runner")), "graphsafe")
CPU = "--cpu" in sys.argv
DEV = torch.device("cpu" if CPU else "cuda")
DT = torch.float32 if CPU else torch.bfloat16  # Triton's interpreter stores fp32 into bf16 wrongly
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_llama")
BS, SLOTS, MAXLEN = 16, 2, 128
PER_SLOT = 4 if WHICH == "graphsafe" else 1  # token rows per request slot
ROWS = SLOTS * PER_SLOT
BLOCKS = SLOTS * (MAXLEN // BS) + 1
H, HK, D = 8, 2, 128
SEQ_LENS = (17, 77, 128)
TOL = 2**-7  # two bf16 ulps at magnitude 0.5..1 (the outputs here are below ~1.5)

LAUNCHES: list[str] = []


class Spy:
    """Records which of vLLM's Triton kernels ``unified_attention`` launches, with its grid and path."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __getitem__(self, grid):
        launch = self.fn[grid]

        def run(*args, **kwargs):
            extra = ""
            if "IS_3D" in kwargs:
                extra = f" IS_3D={kwargs['IS_3D']} segments={kwargs['NUM_SEGMENTS_PER_SEQ']} tile={kwargs['TILE_SIZE']}"
            LAUNCHES.append(f"{self.name}{tuple(grid)}{extra}")
            return launch(*args, **kwargs)

        return run


tua.kernel_unified_attention = Spy("kernel_unified_attention", tua.kernel_unified_attention)
tua.reduce_segments = Spy("reduce_segments", tua.reduce_segments)


def keep(cls, **kw):
    names = set(inspect.signature(cls).parameters)
    return cls(**{k: v for k, v in kw.items() if k in names})


mc = ModelConfig(
    model=MODEL, tokenizer=MODEL, skip_tokenizer_init=True, dtype=str(DT).removeprefix("torch."), seed=0,
    max_model_len=MAXLEN,
)  # fmt: skip
cache = keep(CacheConfig, block_size=BS, cache_dtype="auto")
cache.num_gpu_blocks, cache.num_cpu_blocks = BLOCKS, 0
config = VllmConfig(
    model_config=mc,
    cache_config=cache,
    parallel_config=ParallelConfig(),
    scheduler_config=keep(
        SchedulerConfig, max_num_seqs=4, max_num_batched_tokens=MAXLEN, max_model_len=MAXLEN, is_encoder_decoder=False
    ),
    device_config=DeviceConfig(device=DEV.type),
    load_config=LoadConfig(),
    compilation_config=CompilationConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=[1, 2, 4]),
)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for n in ("q", "k", "v", "prob"):
            self.register_buffer(f"_{n}_scale", torch.ones((), device=DEV))
            setattr(self, f"_{n}_scale_float", 1.0)


spec = keep(FullAttentionSpec, block_size=BS, num_kv_heads=HK, head_size=D, dtype=DT)
with set_current_vllm_config(config):
    layer = Layer()
    config.compilation_config.static_forward_context["layer"] = layer
    impl = TritonAttentionBackend.get_impl_cls()(
        num_heads=H, head_size=D, scale=D**-0.5, num_kv_heads=HK, alibi_slopes=None, sliding_window=None,
        kv_cache_dtype="auto",
    )  # fmt: skip
    builder = TritonAttentionBackend.get_builder_cls()(spec, ["layer"], config, DEV)

# the runner's persistent buffers
g0 = torch.Generator().manual_seed(0)
kv = torch.randn(BLOCKS, BS, HK, 2 * D, generator=g0).to(DT).to(DEV).transpose(1, 2)  # logical layout
qsl_cpu, seq_cpu = torch.zeros(SLOTS + 1, dtype=torch.int32), torch.zeros(SLOTS, dtype=torch.int32)
qsl, seq = torch.zeros_like(qsl_cpu, device=DEV), torch.zeros_like(seq_cpu, device=DEV)
table = torch.zeros(SLOTS, MAXLEN // BS, dtype=torch.int32, device=DEV)
slots = torch.full((ROWS,), -1, dtype=torch.int64, device=DEV)
q = torch.zeros(ROWS, H, D, dtype=DT, device=DEV)
k = torch.zeros(ROWS, HK, D, dtype=DT, device=DEV)
v = torch.zeros_like(k)
out = torch.zeros_like(q)


def prepare(seq_lens, n_slots, seed, capture=False):
    """Single-token decodes of ``seq_lens`` in ``n_slots`` request slots (``n_slots * PER_SLOT`` token rows)."""
    g = torch.Generator().manual_seed(seed)
    tokens, rows = len(seq_lens), n_slots * PER_SLOT
    for t in (q, k, v):
        t.zero_()
        t[:tokens].copy_(torch.randn(t[:tokens].shape, generator=g).to(t.dtype))
    qsl_cpu.copy_(torch.tensor([min(i, tokens) for i in range(SLOTS + 1)]))
    seq_cpu.copy_(torch.tensor(list(seq_lens) + [0] * (SLOTS - tokens)))
    qsl.copy_(qsl_cpu)
    seq.copy_(seq_cpu)
    tab, sl = torch.zeros(table.shape, dtype=torch.int32), torch.full((ROWS,), -1, dtype=torch.int64)
    nxt = 1
    for i, s in enumerate(seq_lens):
        blocks = list(range(nxt, nxt + -(-s // BS)))
        nxt += len(blocks)
        tab[i, : len(blocks)] = torch.tensor(blocks)
        sl[i] = blocks[(s - 1) // BS] * BS + (s - 1) % BS
    table.copy_(tab)
    slots.copy_(sl)
    fields = dict(
        query_start_loc=qsl[: n_slots + 1],
        query_start_loc_cpu=qsl_cpu[: n_slots + 1],
        seq_lens=seq[:n_slots],
        num_reqs=n_slots,
        num_actual_tokens=rows,
        max_query_len=1,
        max_seq_len=MAXLEN if capture else max(seq_lens),
        block_table_tensor=table[:n_slots],
        slot_mapping=slots[:rows],
        causal=True,
        seq_lens_cpu_upper_bound=seq_cpu[:n_slots],
        _seq_lens_cpu=seq_cpu[:n_slots],
        _num_computed_tokens_cpu=seq_cpu[:n_slots] - (qsl_cpu[1 : n_slots + 1] - qsl_cpu[:n_slots]),
    )
    common = CommonAttentionMetadata(
        **{k_: v_ for k_, v_ in fields.items() if k_ in CommonAttentionMetadata.__dataclass_fields__}
    )
    md = builder.build_for_cudagraph_capture(common) if capture else builder.build(0, common)
    return md, rows


def forward(md, rows):
    impl.do_kv_cache_update(layer, k[:rows], v[:rows], kv, md.slot_mapping)
    impl.forward(layer, q[:rows], k[:rows], v[:rows], kv, md, output=out[:rows])


def sync():
    if not CPU:
        torch.cuda.synchronize()


def capture(n_slots):
    """A FULL graph of ``n_slots`` slots captured on single-token decodes in every slot (the runner's dummy
    batch); the KV cache is restored after it.  Returns the graph (CPU: None), its metadata and its launches."""
    kv0 = kv.clone()
    md, rows = prepare([1] * n_slots, n_slots, seed=1, capture=True)
    forward(md, rows)  # warm-up, as the runner's
    sync()
    LAUNCHES.clear()
    graph = None
    if CPU:
        forward(md, rows)
    else:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward(md, rows)
    sync()
    kv.copy_(kv0)
    return graph, (md, rows), list(LAUNCHES)


def run(s, n_slots, graph=None):
    """The live decode of length ``s`` in ``n_slots`` slots, eagerly or replayed; (output row, launches)."""
    LAUNCHES.clear()
    md, rows = prepare([s], n_slots, seed=2)
    if graph is None:
        forward(md, rows)
        launched = list(LAUNCHES)
    else:
        g, cap, launched = graph
        if g is None:
            forward(*cap)
        else:
            g.replay()
    sync()
    return out[0].float().clone(), launched


def reference(s):
    """The live decode in fp32 over the cache its step wrote."""
    kvf, tab = kv.float().cpu(), table.cpu()
    kv_ = torch.stack([kvf[int(tab[0, p // BS]), :, p % BS] for p in range(s)]).repeat_interleave(H // HK, 1)
    w = (torch.einsum("hd,thd->ht", q[0].float().cpu(), kv_[..., :D]) * D**-0.5).softmax(-1)
    return torch.einsum("ht,thd->hd", w, kv_[..., D:]).to(DEV)


def path(launched):
    for p in launched:
        if p.startswith("kernel_unified_attention"):
            return "3D split-KV" if "IS_3D=True" in p else "2D"
    return "?"


def main():
    dev = "cpu (dry run, fp32)" if CPU else torch.cuda.get_device_name()
    print(f"vllm {vllm.__version__}, torch {torch.__version__}, device {dev}")
    print(
        f"case {WHICH}: {PER_SLOT} token row(s) per slot; seq_threshold_3D={builder.seq_threshold_3D}, "
        f"split-KV scratch rows {builder.softmax_segm_max.shape[0]}"
    )
    graphs = {n: capture(n) for n in (1, SLOTS)}
    for n, (_, _, launched) in graphs.items():
        print(f"  graph of {n} slot(s) ({n * PER_SLOT} rows) holds: {launched}")
    worst = dict(diff=0.0, n=0, total=0, err_alone=0.0, err_padded=0.0)
    paths = {}
    for s in SEQ_LENS:
        alone, la = run(s, 1)
        padded, lp = run(s, SLOTS)
        ref = reference(s)
        alone_r, _ = run(s, 1, graphs[1])
        padded_r, _ = run(s, SLOTS, graphs[SLOTS])
        paths = {"alone": path(la), "padded": path(lp), "alone replay": path(graphs[1][2])}
        paths["padded replay"] = path(graphs[SLOTS][2])
        d = (padded - alone).abs()
        n = int((padded != alone).sum())
        errs = {name: float((x - ref).abs().max()) for name, x in (("alone", alone), ("padded", padded))}
        errs["alone replay"] = float((alone_r - ref).abs().max())
        errs["padded replay"] = float((padded_r - ref).abs().max())
        print(f"  seq_len {s}: eager alone launched {la}")
        print(f"             eager padded launched {lp}")
        print(
            f"    |padded - alone|: {n} of {d.numel()} outputs differ, max {float(d.max()):.4g}; "
            f"|replay - eager|: alone {float((alone_r - alone).abs().max()):.4g}, "
            f"padded {float((padded_r - padded).abs().max()):.4g}"
        )
        print("    max |run - fp32 reference|: " + ", ".join(f"{k_} {e:.4g}" for k_, e in errs.items()))
        worst["diff"] = max(worst["diff"], float(d.max()))
        worst["n"] += n
        worst["total"] += d.numel()
        worst["err_alone"] = max(worst["err_alone"], errs["alone"], errs["alone replay"])
        worst["err_padded"] = max(worst["err_padded"], errs["padded"], errs["padded replay"])
    ok = max(worst["err_alone"], worst["err_padded"]) <= TOL
    verdict = (
        f"numerics only (both within {TOL:.4g} of the fp32 reference)"
        if ok
        else f"NOT numerics only (a run is more than {TOL:.4g} off the fp32 reference)"
    )
    print(
        f"SUMMARY {WHICH} ({vllm.__version__}): alone {paths['alone']}, padded to {SLOTS} slots {paths['padded']} "
        f"(replays: {paths['alone replay']} / {paths['padded replay']}); padded vs alone: {worst['n']} of "
        f"{worst['total']} outputs differ, max {worst['diff']:.4g}; max |run - fp32 ref|: alone {worst['err_alone']:.4g}, "
        f"padded {worst['err_padded']:.4g}: {verdict}"
    )


main()

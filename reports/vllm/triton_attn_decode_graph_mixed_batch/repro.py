"""Standalone repro (torch and vLLM only): vLLM's TRITON_ATTN, a FULL CUDA graph captured on a batch of decodes
(every query one token), replayed for a batch with prefill tokens; and the eager paths of one padded graph.

    python3 repro.py [2] [1] [3] [4] [5] [--cpu]    # the cases, in order (default: 1); the model config: tiny_llama/ beside it

What vLLM's runner does in cudagraph_mode FULL (TRITON_ATTN's builder says ALWAYS: any batch may replay a
FULL graph): the graph for 16 token rows is captured with a dummy batch, here four single-token requests
padded to 16 rows (``max_query_len == 1``), and later serves a mixed batch of the same rows.  The attention
call decides its kernel on the host from ``max_query_len`` (the 3D split-KV decode kernel, or the 2D one);
the graph keeps the capture's.  The script prints, for each case, the largest difference from the eager
result of the same step, or the CUDA error the replay raised.  ``--cpu`` runs the same flow eagerly (no
graph; a dry run of the script itself).
"""

from __future__ import annotations

import os
import sys

import torch

os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

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
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402

CPU = "--cpu" in sys.argv
DEV = torch.device("cpu" if CPU else "cuda")
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_llama")
BS, REQS, QMAX, MAXLEN = 16, 4, 4, 128
ROWS = REQS * QMAX  # the graph's token rows
BLOCKS = REQS * (MAXLEN // BS) + 1
H, HK, D = 8, 2, 128


def keep(cls, **kw):
    import inspect

    names = set(inspect.signature(cls).parameters)
    return cls(**{k: v for k, v in kw.items() if k in names})


mc = ModelConfig(model=MODEL, tokenizer=MODEL, skip_tokenizer_init=True, dtype="bfloat16", seed=0, max_model_len=MAXLEN)
cache = keep(CacheConfig, block_size=BS, cache_dtype="auto")
cache.num_gpu_blocks, cache.num_cpu_blocks = BLOCKS, 0
config = VllmConfig(
    model_config=mc,
    cache_config=cache,
    parallel_config=ParallelConfig(),
    scheduler_config=keep(
        SchedulerConfig,
        max_num_seqs=REQS,
        max_num_batched_tokens=MAXLEN,
        max_model_len=MAXLEN,
        is_encoder_decoder=False,
    ),
    device_config=DeviceConfig(device=DEV.type),
    load_config=LoadConfig(),
    compilation_config=CompilationConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=[4, 8, 16]),
)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for n in ("q", "k", "v", "prob"):
            self.register_buffer(f"_{n}_scale", torch.ones((), device=DEV))
            setattr(self, f"_{n}_scale_float", 1.0)


spec = keep(FullAttentionSpec, block_size=BS, num_kv_heads=HK, head_size=D, dtype=torch.bfloat16)
with set_current_vllm_config(config):
    layer = Layer()
    config.compilation_config.static_forward_context["layer"] = layer
    impl = TritonAttentionBackend.get_impl_cls()(
        num_heads=H,
        head_size=D,
        scale=D**-0.5,
        num_kv_heads=HK,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype="auto",
    )
    builder = TritonAttentionBackend.get_builder_cls()(spec, ["layer"], config, DEV)

# the runner's persistent buffers
qsl_cpu = torch.zeros(REQS + 1, dtype=torch.int32)
seq_cpu = torch.zeros(REQS, dtype=torch.int32)
qsl, seq = torch.zeros_like(qsl_cpu, device=DEV), torch.zeros_like(seq_cpu, device=DEV)
table = torch.zeros(REQS, MAXLEN // BS, dtype=torch.int32, device=DEV)
slots = torch.full((ROWS,), -1, dtype=torch.int64, device=DEV)
kv = torch.randn(BLOCKS, BS, HK, 2 * D, dtype=torch.bfloat16, device=DEV).transpose(1, 2)  # logical layout
q = torch.zeros(ROWS, H, D, dtype=torch.bfloat16, device=DEV)
k = torch.zeros(ROWS, HK, D, dtype=torch.bfloat16, device=DEV)
v = torch.zeros_like(k)
out = torch.zeros_like(q)


def prepare(query_lens, seq_lens, seed, capture=False):
    """The step into the persistent buffers, and the builder's metadata over views of them."""
    g = torch.Generator().manual_seed(seed)
    tokens = sum(query_lens)
    for t in (q, k, v):
        t.zero_()
        t[:tokens].copy_(torch.randn(t[:tokens].shape, generator=g).to(t.dtype))
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)
    qsl_cpu.copy_(torch.tensor(cu + [tokens] * (REQS + 1 - len(cu))))
    seq_cpu.copy_(torch.tensor(list(seq_lens) + [0] * (REQS - len(seq_lens))))
    qsl.copy_(qsl_cpu)
    seq.copy_(seq_cpu)
    tab, sl = torch.zeros_like(table, device="cpu"), torch.full((ROWS,), -1, dtype=torch.int64)
    row, nxt = 0, 1
    for i, (n, s) in enumerate(zip(query_lens, seq_lens)):
        blocks = list(range(nxt, nxt + -(-s // BS)))
        nxt += len(blocks)
        tab[i, : len(blocks)] = torch.tensor(blocks)
        sl[row : row + n] = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(s - n, s)])
        row += n
    table.copy_(tab)
    slots.copy_(sl)
    common = CommonAttentionMetadata(
        **{
            k_: v_
            for k_, v_ in dict(
                query_start_loc=qsl,
                query_start_loc_cpu=qsl_cpu,
                seq_lens=seq,
                num_reqs=REQS,
                num_actual_tokens=ROWS,
                max_query_len=max(query_lens),
                max_seq_len=MAXLEN if capture else max(seq_lens),
                block_table_tensor=table,
                slot_mapping=slots,
                causal=True,
                seq_lens_cpu_upper_bound=seq_cpu,
                _seq_lens_cpu=seq_cpu,
            ).items()
            if k_ in CommonAttentionMetadata.__dataclass_fields__
        }
    )
    return builder.build_for_cudagraph_capture(common) if capture else builder.build(0, common)


def forward(md):
    impl.do_kv_cache_update(layer, k, v, kv, md.slot_mapping)
    impl.forward(layer, q, k, v, kv, md, output=out)
    return out


def case(name, capture_batch, step_batch, poison=False):
    kv0 = kv.clone()
    md = prepare(*capture_batch, seed=1, capture=True)
    forward(md)  # warm-up, as the runner's
    if CPU:
        graph = None
    else:
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward(md)
    tokens = sum(step_batch[0])
    if poison:  # the split-KV partials: NaN, so that a replay reading one it did not write shows
        for t in (getattr(builder, f"softmax_segm_{n}", None) for n in ("output", "max", "expsum")):
            if t is not None:
                t.fill_(float("nan"))
    try:
        kv.copy_(kv0)
        eager = forward(prepare(*step_batch, seed=2))[:tokens].clone()  # the same step without a graph
        kv.copy_(kv0)
        prepare(*step_batch, seed=2)
        if graph is None:
            forward(prepare(*step_batch, seed=2))
        else:
            graph.replay()
            torch.cuda.synchronize()
        replayed = out[:tokens].clone()
        diff = (replayed.float() - eager.float()).abs()
        print(
            f"{name}: max |replay - eager| = {diff.max().item():.4g}, {int((diff > 0.05).sum())} of {diff.numel()} > 0.05"
            f", {int(diff.isnan().sum())} NaN"
        )
    except Exception as e:  # noqa: BLE001 - a device fault is the result too
        print(f"{name}: the replay failed: {type(e).__name__}: {str(e).splitlines()[0]}")
        raise SystemExit(1) from None


CASES = {
    "1": (
        "captured on 4 decodes (3D kernel), replayed for 3+4+2+4 tokens",
        ((1, 1, 1, 1), (40, 9, 70, 21)),
        ((3, 4, 2, 4), (38, 81, 128, 90)),
    ),
    "2": (
        "captured on 4 x 4 tokens (2D kernel), replayed for 4 decodes",
        ((4, 4, 4, 4), (128, 128, 128, 128)),
        ((1, 1, 1, 1), (38, 81, 128, 90)),
    ),
    "3": (
        "captured on 1 decode in 4 slots (3D kernel, 3 padded requests), replayed for 1+1+4+3 tokens",
        ((1,), (1,)),
        ((1, 1, 4, 3), (31, 127, 128, 128)),
    ),
    "4": (
        "captured on 4 decodes (3D kernel), replayed for 1+1+4+3 tokens (sequences up to the model's longest)",
        ((1, 1, 1, 1), (40, 9, 70, 21)),
        ((1, 1, 4, 3), (31, 127, 128, 128)),
    ),
    "5": (
        "case 4 with the split-KV partial buffers NaN before the replay",
        ((1, 1, 1, 1), (40, 9, 70, 21)),
        ((1, 1, 4, 3), (31, 127, 128, 128)),
        True,
    ),
}
for which in [a for a in sys.argv[1:] if a in CASES] or ["1"]:  # in the order given; a device fault ends the run
    case(*CASES[which])

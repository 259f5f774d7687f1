"""Standalone repro (torch and vLLM only): vLLM's FLEX_ATTENTION reads its persistent request-id buffer at padded
token rows, and allocates that buffer uninitialised.

    python3 repro.py cold|warm|capture1|capture2    # one case per process (a device fault ends its CUDA context)

vLLM's runner pads a FULL CUDA graph's token rows past the live tokens (``num_actual_tokens`` counts them; the
padded requests get query length 0).  FLEX_ATTENTION's builder maps live tokens to requests (``doc_ids``, copied
into ``persistent_doc_ids``, a ``torch.empty`` buffer of ``max_num_batched_tokens``), and the flex kernel runs its
mask over every row of the query, the padded ones too: there it looks up ``persistent_doc_ids`` past the live
tokens, and with that request index ``physical_to_logical``, ``seq_lens`` and ``query_start_loc``.

* ``cold``: a fresh builder, its request-id buffer holding what uninitialised memory may hold (filled with 2**24
  here, so that the run is deterministic), builds one padded batch (2 live decodes in 8 token rows) and runs the
  impl eagerly, no graph: the kernel indexes far out of bounds (expected: an illegal memory access).
* ``warm``: the same, after one build over a batch whose every row is live (what the runner's profile and capture
  dummy runs do before it serves a batch): the padded rows find valid request ids, and the live rows equal a
  torch reference.

In vLLM's own runner the dummy runs always come first, so this is a hazard for a caller that drives the builder
itself (a test harness), not a fault of vLLM's serving path.

* ``capture1`` / ``capture2``: after the ``warm`` build, a graph of 8 token rows captured on a batch with one (two)
  live decodes, replayed for two decodes of other requests.  The compiled flex kernel depends on how many tokens
  were live at capture: captured on one, the second request's row comes out wrong; captured on two, the replay
  equals eager.  vLLM's runner captures on dummy batches whose rows are all live, so its graphs are not exposed.
"""

from __future__ import annotations

import inspect
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
from vllm.v1.attention.backends.flex_attention import FlexAttentionBackend  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402

CPU = "--cpu" in sys.argv
DEV = torch.device("cpu" if CPU else "cuda")
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_llama")
BS, REQS, QMAX, MAXLEN = 16, 4, 4, 128
ROWS = REQS * QMAX
BLOCKS = REQS * (MAXLEN // BS) + 1
H, HK, D = 8, 2, 128


def keep(cls, **kw):
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
    impl = FlexAttentionBackend.get_impl_cls()(
        num_heads=H,
        head_size=D,
        scale=D**-0.5,
        num_kv_heads=HK,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype="auto",
    )
    builder = FlexAttentionBackend.get_builder_cls()(spec, ["layer"], config, DEV)
builder.persistent_doc_ids.fill_(1 << 24)  # what torch.empty may hand out, made deterministic

g = torch.Generator().manual_seed(0)
store = torch.randn(BLOCKS, BS, HK, 2 * D, generator=g).to(torch.bfloat16).to(DEV)  # physical NHD
kv = store.transpose(1, 2)  # vLLM's logical (blocks, kv_heads, block_size, 2 * head_size)
q = torch.zeros(ROWS, H, D, dtype=torch.bfloat16, device=DEV)
out = torch.zeros_like(q)
qsl_cpu, seq_cpu = torch.zeros(REQS + 1, dtype=torch.int32), torch.zeros(REQS, dtype=torch.int32)
qsl, seq = torch.zeros_like(qsl_cpu, device=DEV), torch.zeros_like(seq_cpu, device=DEV)
table = torch.zeros(REQS, MAXLEN // BS, dtype=torch.int32, device=DEV)
slots = torch.full((ROWS,), -1, dtype=torch.int64, device=DEV)


def build(query_lens, seq_lens, blocks, rows, capture=False):
    """The runner's buffers for one step (requests past ``query_lens`` padded), and the builder's metadata."""
    tokens = sum(query_lens)
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)
    qsl_cpu.copy_(torch.tensor(cu + [tokens] * (REQS + 1 - len(cu))))
    seq_cpu.copy_(torch.tensor(list(seq_lens) + [0] * (REQS - len(seq_lens))))
    qsl.copy_(qsl_cpu)
    seq.copy_(seq_cpu)
    tab = torch.zeros_like(table, device="cpu")
    for i, b in enumerate(blocks):
        tab[i, : len(b)] = torch.tensor(b)
    table.copy_(tab)
    common = CommonAttentionMetadata(
        **{
            k: v
            for k, v in dict(
                query_start_loc=qsl,
                query_start_loc_cpu=qsl_cpu,
                seq_lens=seq,
                num_reqs=REQS,
                num_actual_tokens=rows,
                max_query_len=max(query_lens),
                max_seq_len=max(seq_lens),
                block_table_tensor=table,
                slot_mapping=slots[:rows],
                causal=True,
                seq_lens_cpu_upper_bound=seq_cpu,
                _seq_lens_cpu=seq_cpu,
                _num_computed_tokens_cpu=seq_cpu - (qsl_cpu[1:] - qsl_cpu[:-1]),
            ).items()
            if k in CommonAttentionMetadata.__dataclass_fields__
        }
    )
    return builder.build_for_cudagraph_capture(common) if capture else builder.build(0, common)


def reference(i, blocks, s):
    """Decode row ``i`` attending to all ``s`` keys of its blocks, in fp32."""
    idx = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(s)], device=DEV)
    flat = store.reshape(-1, HK, 2 * D)[idx].float()
    k, v = flat[..., :D].repeat_interleave(H // HK, 1), flat[..., D:].repeat_interleave(H // HK, 1)
    w = (torch.einsum("hd,thd->ht", q[i].float(), k) * D**-0.5).softmax(-1)
    return torch.einsum("ht,thd->hd", w, v)


def padded_rows(which):
    """``cold`` or ``warm``: one padded batch, eagerly."""
    if which == "warm":  # the runner's dummy run: every token row live, the null block, no cache write
        build([QMAX] * REQS, [QMAX] * REQS, [[0]] * REQS, ROWS)
    md = build([1, 1], [20, 7], [[3, 4], [9]], 8)  # 2 live decodes, 8 token rows (a graph of 2 slots x 4 rows)
    print(f"{which}: persistent_doc_ids[:8] = {builder.persistent_doc_ids[:8].tolist()}", flush=True)
    q[:2].copy_(torch.randn(2, H, D, generator=g).to(torch.bfloat16))
    try:
        impl.forward(layer, q[:8], q[:8, :HK], q[:8, :HK], kv, md, output=out[:8])
        if not CPU:
            torch.cuda.synchronize()
        err = max(
            float((out[i].float() - reference(i, b, s)).abs().max()) for i, b, s in ((0, [3, 4], 20), (1, [9], 7))
        )
        print(f"{which}: ran; live rows' max |flex - reference| = {err:.4g}")
    except Exception as e:  # noqa: BLE001 - a device fault is the result too
        print(f"{which}: the flex call failed: {type(e).__name__}: {str(e).splitlines()[0]}")
        raise SystemExit(1) from None


def one_live_capture(which):
    """``capture1`` or ``capture2``: a graph of 8 token rows (2 slots x 4) captured on a batch with 1 or 2 live
    decodes, replayed for 2 live decodes of other requests; the replay against an eager run of the same step."""
    build([QMAX] * REQS, [QMAX] * REQS, [[0]] * REQS, ROWS)  # the runner's dummy run first (see padded_rows)
    live = 1 if which == "capture1" else 2
    q[:live].copy_(torch.randn(live, H, D, generator=g).to(torch.bfloat16))
    md = build([1] * live, [13, 30][:live], [[5], [6, 7]][:live], 8, capture=True)

    def forward(m):
        impl.forward(layer, q[:8], q[:8, :HK], q[:8, :HK], kv, m, output=out[:8])

    forward(md)  # warm-up (compiles), as the runner's
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward(md)
    q[:2].copy_(torch.randn(2, H, D, generator=g).to(torch.bfloat16))
    step = build([1, 1], [20, 7], [[3, 4], [9]], 8)
    graph.replay()
    torch.cuda.synchronize()
    replayed = out[:2].clone()
    forward(step)  # the same step eagerly
    torch.cuda.synchronize()
    eager = out[:2].clone()
    err = [float((replayed[i].float() - reference(i, b, s)).abs().max()) for i, b, s in ((0, [3, 4], 20), (1, [9], 7))]
    print(
        f"{which}: captured on {live} live decode(s): max |replay - eager| = "
        f"{float((replayed.float() - eager.float()).abs().max()):.4g}; |replay - reference| per live row = "
        + ", ".join(f"{e:.4g}" for e in err)
    )


which = next((a for a in sys.argv[1:] if a in ("cold", "warm", "capture1", "capture2")), "cold")
if which in ("cold", "warm"):
    padded_rows(which)
else:
    one_live_capture(which)

"""Standalone repro (torch and vLLM only): vLLM's TRITON_ATTN runs its 3D split-KV kernel over more token rows
than its split-KV scratch has, when a FULL CUDA graph holds more token rows than the capture sizes vLLM's config
lists.

    python3 repro.py decode|mixed|sweep|control|fault [--cpu]    # one case per process; tiny_llama/ beside it

The builder sizes the split-KV partials (``softmax_segm_output`` / ``_max`` / ``_expsum``, indexed by token row)
for ``seq_threshold_3D`` rows: the capture size closest to 128 / num_kv_heads (vLLM 0.26.0), or that bounded by
``max_num_seqs`` (0.33.0).  The 3D kernel writes the partials of every live token row, and ``reduce_segments``
runs one program per token row of ``q`` (padded rows too), reading them back.  Here the config lists capture
sizes 1, 2, 4 (scratch: 4 rows) while the graph holds 4 request slots x 4 token rows (16 rows), captured on four
single-token decodes (the 3D kernel), as graphsafe's adapter does for a backend whose builder says ALWAYS.
vLLM 0.26.0 launches the 3D path for it; 0.33.0 falls back to the 2D kernel when the scratch has fewer rows
than ``q`` and skips padded rows in ``reduce_segments``.

* ``decode``: the graph replayed for four decodes (4 live rows, within the scratch; ``reduce_segments`` still
  reads rows 4..15 for the padded rows), and the same step eagerly.
* ``mixed``: replayed for 1+1+4+3 tokens (9 live rows: the 3D kernel writes rows 4..8 past the scratch).
* ``sweep``: 40 seeded batches (1-4 live requests, query lengths 1-4, sequence lengths up to 128).
* ``control``: ``mixed`` with capture sizes 4, 8, 16 (scratch: 16 rows, as many as the graph).
* ``fault``: ``mixed`` with the runner's buffers allocated after the builder (graphsafe's adapter's order), so
  that what lies past the scratch is the step's own metadata: expect a CUDA error or garbage.

Every replay runs three times, the partials filled with NaN, 0 and 0 before each: replays 2 and 3 differing means
a race (same inputs), replays 1 and 2 differing alone means a read of cells no program wrote.  Except in
``fault``, a canary allocated right after the scratch (the caching allocator places them side by side; the
script prints the gaps) shows how many bytes were written past it.  Live rows are compared with an fp32 torch
reference.  ``--cpu`` is a dry run (Triton's interpreter, fp32, no graph: the replay is the captured metadata run
over the step's buffers, which is what the graph does; the scratch and canary are views of one buffer there, so
that the interpreter's out-of-bounds accesses stay inside it).  The last line of each case starts ``SUMMARY``.
"""

from __future__ import annotations

import inspect
import os
import random
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

CASES = ("decode", "mixed", "sweep", "control", "fault")
WHICH = next((a for a in sys.argv[1:] if a in CASES), "mixed")
CPU = "--cpu" in sys.argv
DEV = torch.device("cpu" if CPU else "cuda")
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_llama")
BS, REQS, QMAX, MAXLEN = 16, 4, 4, 128
ROWS = REQS * QMAX  # the graph's token rows: 4 request slots x 4
BLOCKS = REQS * (MAXLEN // BS) + 1
H, HK, D = 8, 2, 128
DT = torch.float32 if CPU else torch.bfloat16  # Triton's interpreter stores fp32 into bf16 wrongly
SIZES = [4, 8, 16] if WHICH == "control" else [1, 2, 4]  # the config's capture sizes (tokens)
CANARY_BYTES = 768 << 10  # covers 16 rows of segm_output past the 4-row scratch
MIXED = ((1, 1, 4, 3), (31, 127, 128, 128))
DECODES = ((1, 1, 1, 1), (40, 9, 70, 21))

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
    model=MODEL,
    tokenizer=MODEL,
    skip_tokenizer_init=True,
    dtype=str(DT).removeprefix("torch."),
    seed=0,
    max_model_len=MAXLEN,
)
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
    compilation_config=CompilationConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=SIZES),
)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for n in ("q", "k", "v", "prob"):
            self.register_buffer(f"_{n}_scale", torch.ones((), device=DEV))
            setattr(self, f"_{n}_scale_float", 1.0)


def runner_buffers():
    """The runner's persistent buffers (the step's metadata first, as graphsafe's adapter allocates them), then
    the KV cache and the token inputs."""
    g = torch.Generator().manual_seed(0)
    bufs = dict(
        qsl=torch.zeros(REQS + 1, dtype=torch.int32, device=DEV),
        seq=torch.zeros(REQS, dtype=torch.int32, device=DEV),
        table=torch.zeros(REQS, MAXLEN // BS, dtype=torch.int32, device=DEV),
        slots=torch.full((ROWS,), -1, dtype=torch.int64, device=DEV),
    )
    bufs["kv"] = torch.randn(BLOCKS, BS, HK, 2 * D, generator=g).to(DT).to(DEV).transpose(1, 2)  # logical layout
    for name, heads in (("q", H), ("k", HK), ("v", HK), ("out", H)):
        bufs[name] = torch.zeros(ROWS, heads, D, dtype=DT, device=DEV)
    return bufs


def make_backend():
    spec = keep(FullAttentionSpec, block_size=BS, num_kv_heads=HK, head_size=D, dtype=DT)
    with set_current_vllm_config(config):
        layer = Layer()
        config.compilation_config.static_forward_context["layer"] = layer
        impl = TritonAttentionBackend.get_impl_cls()(
            num_heads=H, head_size=D, scale=D**-0.5, num_kv_heads=HK, alibi_slopes=None, sliding_window=None,
            kv_cache_dtype="auto",
        )  # fmt: skip
        builder = TritonAttentionBackend.get_builder_cls()(spec, ["layer"], config, DEV)
    return layer, impl, builder


SCRATCH = ("softmax_segm_output", "softmax_segm_max", "softmax_segm_expsum")
if (
    WHICH == "fault" and not CPU
):  # graphsafe's adapter's order: the builder, then the runner's buffers right after its scratch
    layer, impl, builder = make_backend()
    B = runner_buffers()
    canary = None
else:  # the runner's buffers first; a canary right after the scratch takes what is written past it
    B = runner_buffers()
    layer, impl, builder = make_backend()
    if CPU:  # one buffer: the interpreter accesses raw memory, so out-of-bounds must stay inside an allocation
        parts = [getattr(builder, n) for n in SCRATCH]
        whole = torch.empty(sum(t.numel() for t in parts) + CANARY_BYTES // 4, dtype=torch.float32)
        at = 0
        for n, t in zip(SCRATCH, parts):
            setattr(builder, n, whole[at : at + t.numel()].view(t.shape))
            at += t.numel()
        canary = whole[at:]
    else:
        canary = torch.empty(CANARY_BYTES // 4, dtype=torch.float32, device=DEV)
    canary.fill_(7.0)
scratch = [getattr(builder, n) for n in SCRATCH]
qsl_cpu = torch.zeros(REQS + 1, dtype=torch.int32)
seq_cpu = torch.zeros(REQS, dtype=torch.int32)


def prepare(query_lens, seq_lens, seed, capture=False):
    """The step into the persistent buffers (requests past ``query_lens`` padded: query length 0, sequence
    length 0, block row 0, slot -1), and the builder's metadata over views of them."""
    g = torch.Generator().manual_seed(seed)
    tokens = sum(query_lens)
    for t in (B["q"], B["k"], B["v"]):
        t.zero_()
        t[:tokens].copy_(torch.randn(t[:tokens].shape, generator=g).to(t.dtype))
    cu = [0]
    for n in query_lens:
        cu.append(cu[-1] + n)
    qsl_cpu.copy_(torch.tensor(cu + [tokens] * (REQS + 1 - len(cu))))
    seq_cpu.copy_(torch.tensor(list(seq_lens) + [0] * (REQS - len(seq_lens))))
    B["qsl"].copy_(qsl_cpu)
    B["seq"].copy_(seq_cpu)
    tab, sl = torch.zeros(B["table"].shape, dtype=torch.int32), torch.full((ROWS,), -1, dtype=torch.int64)
    row, nxt = 0, 1
    for i, (n, s) in enumerate(zip(query_lens, seq_lens)):
        blocks = list(range(nxt, nxt + -(-s // BS)))
        nxt += len(blocks)
        tab[i, : len(blocks)] = torch.tensor(blocks)
        sl[row : row + n] = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(s - n, s)])
        row += n
    B["table"].copy_(tab)
    B["slots"].copy_(sl)
    fields = dict(
        query_start_loc=B["qsl"],
        query_start_loc_cpu=qsl_cpu,
        seq_lens=B["seq"],
        num_reqs=REQS,
        num_actual_tokens=ROWS,
        max_query_len=max(query_lens),
        max_seq_len=MAXLEN if capture else max(seq_lens),
        block_table_tensor=B["table"],
        slot_mapping=B["slots"],
        causal=True,
        seq_lens_cpu_upper_bound=seq_cpu,
        _seq_lens_cpu=seq_cpu,
        _num_computed_tokens_cpu=seq_cpu - (qsl_cpu[1:] - qsl_cpu[:-1]),
    )
    common = CommonAttentionMetadata(
        **{k: v for k, v in fields.items() if k in CommonAttentionMetadata.__dataclass_fields__}
    )
    return builder.build_for_cudagraph_capture(common) if capture else builder.build(0, common)


def forward(md):
    impl.do_kv_cache_update(layer, B["k"], B["v"], B["kv"], md.slot_mapping)
    impl.forward(layer, B["q"], B["k"], B["v"], B["kv"], md, output=B["out"])
    return B["out"]


def sync():
    if not CPU:
        torch.cuda.synchronize()


def reference(query_lens, seq_lens):
    """The live rows in fp32 from the cache the step wrote: (tokens, H, D)."""
    kvf, tab, q = B["kv"].float().cpu(), B["table"].cpu(), B["q"].float().cpu()
    rows, row = [], 0
    for i, (n, s) in enumerate(zip(query_lens, seq_lens)):
        at = [(int(tab[i, p // BS]), p % BS) for p in range(s)]
        kv_ = torch.stack([kvf[b, :, o] for b, o in at]).repeat_interleave(H // HK, 1)  # (s, H, 2D)
        for j in range(n):
            pos = s - n + j
            w = (torch.einsum("hd,thd->ht", q[row + j], kv_[: pos + 1, :, :D]) * D**-0.5).softmax(-1)
            rows.append(torch.einsum("ht,thd->hd", w, kv_[: pos + 1, :, D:]))
        row += n
    return torch.stack(rows).to(DEV)


def capture():
    """The graph of ``ROWS`` token rows captured on four single-token decodes (CPU: the capture metadata)."""
    md = prepare(*DECODES, seed=1, capture=True)
    forward(md)  # warm-up, as the runner's
    sync()
    LAUNCHES.clear()
    if CPU:
        forward(md)
        return None, md, list(LAUNCHES)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward(md)
    return graph, md, list(LAUNCHES)


def replay(graph, md, step, fill):
    """The step prepared, the partials filled with ``fill``, one replay; the output rows (all of them)."""
    prepare(*step, seed=2)
    for t in scratch:
        t.fill_(fill)
    if graph is None:
        forward(md)
    else:
        graph.replay()
    sync()
    return B["out"].float().clone()


def describe(a, b, tokens):
    d = (a[:tokens] - b[:tokens]).abs()
    same_nan = a[:tokens].isnan() & b[:tokens].isnan()
    differ = ~((a[:tokens] == b[:tokens]) | same_nan)
    return int(differ.sum()), float(d[~same_nan].max()) if bool((~same_nan).any()) else 0.0, d.numel()


def run_step(graph, md, step, verbose=True):
    tokens = sum(step[0])
    kv0 = B["kv"].clone()
    if canary is not None:
        canary.fill_(7.0)
    r = [replay(graph, md, step, fill) for fill in (float("nan"), 0.0, 0.0)]
    touched = int((canary != 7.0).sum()) * 4 if canary is not None else None
    ref = reference(*step).reshape(tokens, -1)
    live = [x[:tokens].reshape(tokens, -1) for x in r]
    n12, m12, total = describe(live[0], live[1], tokens)
    n23, m23, _ = describe(live[1], live[2], tokens)
    err = max(float((x - ref).abs().nan_to_num(float("inf")).max()) for x in live)
    B["kv"].copy_(kv0)
    LAUNCHES.clear()
    eager = forward(prepare(*step, seed=2)).float()[:tokens].reshape(tokens, -1)
    sync()
    eager_path = list(LAUNCHES)
    eager_err = float((eager - ref).abs().nan_to_num(float("inf")).max())
    B["kv"].copy_(kv0)
    res = dict(tokens=tokens, n12=n12, m12=m12, n23=n23, m23=m23, total=total, err=err, eager_err=eager_err)
    res["touched"] = touched
    if verbose:
        rows = ", ".join(str(i) for i in range(tokens) if describe(live[0][i : i + 1], live[1][i : i + 1], 1)[0])
        print(
            f"  step query_lens={step[0]} seq_lens={step[1]}: {tokens} live token rows, scratch rows {scratch[1].shape[0]}"
        )
        print(
            f"  replay 1 (partials NaN) vs 2 (partials 0): {n12} of {total} live values differ, max {m12:.4g}; rows: [{rows}]"
        )
        print(f"  replay 2 vs 3 (both partials 0): {n23} of {total} differ, max {m23:.4g}")
        print(f"  max |replay - fp32 reference| over the 3 replays: {err:.4g} (inf: NaN)")
        print(f"  eager, same step: max |eager - reference| = {eager_err:.4g}; launches {eager_path}")
        if touched is not None:
            print(f"  canary past the scratch: {touched} bytes written")
    return res


def layout():
    after = ("canary", canary) if canary is not None else ("query_start_loc", B["qsl"])
    names, ts = [*SCRATCH, after[0]], [*scratch, after[1]]
    gaps = [
        ts[i + 1].data_ptr() - (ts[i].data_ptr() + ts[i].numel() * ts[i].element_size()) for i in range(len(ts) - 1)
    ]
    shapes = ", ".join(f"{n}{tuple(t.shape)}" for n, t in zip(names, ts))
    print(f"  scratch: {shapes}; byte gaps between them: {gaps}")


def main():
    print(
        f"vllm {vllm.__version__}, torch {torch.__version__}, device {'cpu (dry run)' if CPU else torch.cuda.get_device_name()}"
    )
    print(
        f"case {WHICH}: capture sizes {SIZES}, builder seq_threshold_3D={builder.seq_threshold_3D}, graph rows {ROWS}"
    )
    layout()
    try:
        graph, md, path = capture()
        print(f"  the graph holds: {path}")
        held_3d = any("IS_3D=True" in p for p in path)
        if WHICH == "sweep":
            rng = random.Random(0)
            rows = scratch[1].shape[0]
            found = {"over": [0, 0, 0, 0.0], "within": [0, 0, 0, 0.0]}  # batches, differing, off the reference, max
            for i in range(6 if CPU else 40):
                while True:  # every other batch within the scratch's rows
                    n = rng.randint(1, REQS)
                    ql = [rng.randint(1, QMAX) for _ in range(n)]
                    if i % 2 == 0 or sum(ql) <= rows:
                        break
                sl = [rng.randint(q_, MAXLEN) for q_ in ql]
                r = run_step(graph, md, (tuple(ql), tuple(sl)), verbose=False)
                f = found["over" if r["tokens"] > rows else "within"]
                f[0] += 1
                f[1] += int(r["n12"] > 0 or r["n23"] > 0)
                f[2] += int(not r["err"] <= 0.05)
                f[3] = max(f[3], r["err"])
                print(
                    f"  {tuple(ql)} {tuple(sl)}: {r['tokens']} rows, replays differ {r['n12']}/{r['n23']} values, "
                    f"max |replay - ref| {r['err']:.4g}, eager {r['eager_err']:.4g}"
                )
            o, w = found["over"], found["within"]
            print(
                f"SUMMARY sweep ({vllm.__version__}): graph {'3D' if held_3d else '2D'}, scratch {rows} rows; "
                f"batches with more live rows than that: {o[1]} of {o[0]} give differing replays, {o[2]} are > 0.05 off "
                f"the fp32 reference (max {o[3]:.4g}); batches within it: {w[1]} of {w[0]} differ, {w[2]} off "
                f"(max {w[3]:.4g})"
            )
            return
        r = run_step(graph, md, DECODES if WHICH == "decode" else MIXED)
        print(
            f"SUMMARY {WHICH} ({vllm.__version__}): graph {'3D' if held_3d else '2D'}, {r['tokens']} live rows, scratch "
            f"{scratch[1].shape[0]} rows; replays NaN/0 differ in {r['n12']} of {r['total']} (max {r['m12']:.4g}), "
            f"0/0 in {r['n23']} (max {r['m23']:.4g}); max |replay - fp32 ref| {r['err']:.4g}, eager {r['eager_err']:.4g}"
            + (f"; canary bytes written {r['touched']}" if r["touched"] is not None else "")
        )
    except Exception as e:  # noqa: BLE001 - a device fault is the result too
        print(f"SUMMARY {WHICH} ({vllm.__version__}): failed: {type(e).__name__}: {str(e).splitlines()[0]}")
        raise SystemExit(1) from None


main()

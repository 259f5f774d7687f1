"""FlashInfer tensor-core decode with ``fixed_split_size`` under a CUDA graph (torch and FlashInfer only).

With a fixed split size, whether ``plan()`` splits the KV (``plan_info``'s ``split_kv``) depends on the
batch: one chunk per request, no split.  A graph keeps the plan values it was captured with.  Captured
with short sequences (no split), the graph then replays a plan of long sequences (several chunks per
request) with the unsplit kernel.  graphsafe found this as ``flashinfer:decode:fixed_split``
(frozen-host-value ``plan_info.split_kv``); on an H100 the replay's output differs from eager, or the
process faults with an illegal memory access.  FlashInfer's docstring for ``fixed_split_size``:
"compatibility with CUDA graph is NOT guaranteed".

    python examples/flashinfer/fixed_split_under_graph.py     # exit 1: graph and eager disagree (or it faulted)
"""

import sys

import flashinfer
import torch

DEV, PAGE, HQ, HKV, D, REQS, MAX_PAGES = "cuda", 16, 8, 2, 128, 4, 16
BF16 = torch.bfloat16


def metadata(pages: list[int]):
    indptr = torch.tensor([0] + [sum(pages[: i + 1]) for i in range(len(pages))], dtype=torch.int32)
    indices = torch.cat([torch.arange(1 + r * MAX_PAGES, 1 + r * MAX_PAGES + p) for r, p in enumerate(pages)]).int()
    last = torch.full((len(pages),), PAGE, dtype=torch.int32)
    return indptr, indices, last


def plan(wrapper, pages: list[int]) -> None:
    indptr, indices, last = metadata(pages)
    split = max(1, max(pages) // 2)  # from this batch's longest sequence (the mistake)
    wrapper.plan(indptr, indices, last, HQ, HKV, D, PAGE, q_data_type=BF16, kv_data_type=BF16, fixed_split_size=split)


def main() -> int:
    torch.manual_seed(0)
    k = torch.randn(REQS * MAX_PAGES + 1, PAGE, HKV, D, dtype=BF16, device=DEV)
    v = torch.randn_like(k)
    q = torch.randn(REQS, HQ, D, dtype=BF16, device=DEV)
    out = torch.zeros_like(q)
    buffers = dict(
        paged_kv_indptr_buffer=torch.zeros(REQS + 1, dtype=torch.int32, device=DEV),
        paged_kv_indices_buffer=torch.zeros(REQS * MAX_PAGES, dtype=torch.int32, device=DEV),
        paged_kv_last_page_len_buffer=torch.zeros(REQS, dtype=torch.int32, device=DEV),
    )
    graphed = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.zeros(64 << 20, dtype=torch.uint8, device=DEV),
        "NHD",
        use_cuda_graph=True,
        use_tensor_cores=True,
        **buffers,
    )
    plan(graphed, [1] * REQS)  # the capture batch: one page per request
    captured = list(graphed._plan_info)
    graphed.run(q, (k, v), out=out)  # warm-up
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        graphed.run(q, (k, v), out=out)
    plan(graphed, [MAX_PAGES] * REQS)  # a later step: long sequences
    print(
        f"plan_info captured: {captured}\nplan_info needed:   {list(graphed._plan_info)} (the last value is split_kv)"
    )
    eager = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.zeros(64 << 20, dtype=torch.uint8, device=DEV), "NHD", use_tensor_cores=True
    )
    plan(eager, [MAX_PAGES] * REQS)
    want = eager.run(q, (k, v))
    try:
        g.replay()
        torch.cuda.synchronize()
    except RuntimeError as e:
        print(f"the replay failed: {e}")
        return 1
    diff = (out.float() - want.float()).abs().max().item()
    print(f"max |graph - eager| = {diff:.4g}")
    return 1 if not diff <= 0.05 else 0


if __name__ == "__main__":
    sys.exit(main())

"""FlashInfer MLA under a CUDA graph with query lengths that change between plans (torch and FlashInfer only).

``BatchMLAPagedAttentionWrapper.plan()`` picks its launch grid from the batch's average query length
(``plan_info``'s ``num_blks_x``, the CTAs per cluster, and ``num_blks_y``, the clusters), and a graph keeps
the grid it was captured with.  Captured with a prefill-like batch (8 query rows per request), the graph
then replays a decode plan (1 row per request) with the old grid.  graphsafe found this as
``flashinfer:mla:mixed_batches`` (frozen-host-value ``plan_info.num_blks_x``, captured 2, needed 1).
FlashInfer's ``plan()`` docstring says query offsets and lengths must remain fixed after graph planning:
a usage hazard its docs warn about.

    python examples/flashinfer/mla_query_lengths_under_graph.py   # exit 1: graph and eager disagree
"""

import sys

import torch
from flashinfer import mla

DEV, PAGE, HEADS, CKV, KPE, REQS, PAGES, Q = "cuda", 16, 16, 512, 64, 4, 8, 8
BF16 = torch.bfloat16


def plan(wrapper, q_len: int) -> None:
    qo = torch.arange(0, REQS * q_len + 1, q_len, dtype=torch.int32, device=DEV)
    kv_indptr = torch.arange(0, REQS * PAGES + 1, PAGES, dtype=torch.int32, device=DEV)
    kv_indices = torch.arange(1, REQS * PAGES + 1, dtype=torch.int32, device=DEV)
    kv_len = torch.full((REQS,), PAGES * PAGE, dtype=torch.int32, device=DEV)
    wrapper.plan(
        metadata=mla.MLAPlanMetadata.csr(qo, kv_indptr, kv_indices, kv_len),
        num_heads=HEADS,
        head_dim_ckv=CKV,
        head_dim_kpe=KPE,
        page_size=PAGE,
        causal=True,
        sm_scale=0.07,
        q_data_type=BF16,
        kv_data_type=BF16,
        query_layout="split",
        kv_cache_layout="split",
    )


def main() -> int:
    torch.manual_seed(0)
    ckv = torch.randn(REQS * PAGES + 1, PAGE, CKV, dtype=BF16, device=DEV)
    kpe = torch.randn(REQS * PAGES + 1, PAGE, KPE, dtype=BF16, device=DEV)
    q_nope = torch.randn(REQS * Q, HEADS, CKV, dtype=BF16, device=DEV)
    q_pe = torch.randn(REQS * Q, HEADS, KPE, dtype=BF16, device=DEV)
    out = torch.zeros_like(q_nope)
    bufs = dict(
        qo_indptr=torch.zeros(REQS + 1, dtype=torch.int32, device=DEV),
        kv_indptr=torch.zeros(REQS + 1, dtype=torch.int32, device=DEV),
        kv_indices=torch.zeros(REQS * PAGES, dtype=torch.int32, device=DEV),
        kv_len_arr=torch.zeros(REQS, dtype=torch.int32, device=DEV),
    )
    graphed = mla.BatchMLAPagedAttentionWrapper(
        torch.zeros(64 << 20, dtype=torch.uint8, device=DEV), use_cuda_graph=True, backend="fa2", **bufs
    )
    plan(graphed, Q)  # the capture batch: 8 query rows per request
    captured = list(graphed._planned_backend._plan_info)[:2]
    run = lambda: graphed.run(query=(q_nope, q_pe), kv_cache=(ckv, kpe), out=out)  # noqa: E731
    run()  # warm-up
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    plan(graphed, 1)  # a decode step: one row per request (rows past REQS are not read)
    print(
        f"grid captured (num_blks_x, num_blks_y): {captured}; needed: {list(graphed._planned_backend._plan_info)[:2]}"
    )
    eager = mla.BatchMLAPagedAttentionWrapper(torch.zeros(64 << 20, dtype=torch.uint8, device=DEV), backend="fa2")
    plan(eager, 1)
    want = eager.run(query=(q_nope[:REQS], q_pe[:REQS]), kv_cache=(ckv, kpe))
    g.replay()
    torch.cuda.synchronize()
    diff = (out[:REQS].float() - want.float()).abs().max().item()
    print(f"max |graph - eager| over the live rows = {diff:.4g}")
    return 1 if not diff <= 0.05 else 0


if __name__ == "__main__":
    sys.exit(main())

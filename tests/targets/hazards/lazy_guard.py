"""A have-initialised guard in front of the kernel that fills a buffer the graph reads.

``prepare`` marks the step's derived metadata stale; ``forward`` builds it on first use.  The
warm-up before capture builds it and sets the flag, so the capture skips the builder and
every replay reads what the warm-up wrote.  Unlike ``split_kv.LazyPlannedSplitKV`` (a
planner with a buffer of its own), the builders here write into buffers that ``prepare``
writes too, so "who wrote this allocation" alone does not tell the stale part:

* ``LazyTokenMetadata`` / ``TokenMetadataOnDevice``: torch ops (mixed batches, Triton varlen
  attention) derive per-token rows into the tail of one packed int32 metadata buffer whose
  head ``prepare`` writes;
* ``LazyPlanClearedInPrepare`` / ``PlanClearedInPrepare``: a Triton planner (split-KV decode)
  whose scheduler buffers ``prepare`` clears when it marks the plan stale.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import torch  # noqa: E402

from graphsafe import Batch, CaptureSpec  # noqa: E402

from ._common import padded_table, write_rows  # noqa: E402
from .split_kv import PlannedSplitKV  # noqa: E402
from .varlen import VarlenAttention  # noqa: E402


# -- torch ops: per-token metadata derived on the device (mixed batches) -----------------------
class TokenMetadataOnDevice(VarlenAttention):
    """Safe: ``prepare`` copies per-request lengths into a packed int32 buffer; ``forward``
    derives the per-token rows (``token_req``, ``tok_len``) from them with torch ops, every time.

    ``self.meta`` is ``[query_lens (R) | seq_lens (R) | token_req (T) | tok_len (T)]``: one
    allocation, one host-to-device copy per step for the per-request part.
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        R, T = spec.max_reqs, self.max_tokens
        self.meta = torch.zeros(2 * R + 2 * T, dtype=torch.int32, device=self.device)
        self.req_query_lens = self.meta[:R]
        self.req_seq_lens = self.meta[R : 2 * R]
        self.token_req = self.meta[2 * R : 2 * R + T]
        self.tok_len = self.meta[2 * R + T :]
        self.token_ids = torch.arange(T, device=self.device)
        self.tokens_built = False

    def write_metadata(self, batch: Batch) -> None:
        write_rows(self.req_query_lens, list(batch.query_lens), 0)
        write_rows(self.req_seq_lens, list(batch.seq_lens), 0)
        write_rows(self.block_table, padded_table(batch, self.bps), 0)
        self.tokens_built = False  # a new step: the per-token rows must be derived again

    def build_token_metadata(self) -> None:
        """Per token row: its request and its key count (causal); rows past the live tokens 0, 0."""
        q = self.req_query_lens.long()
        s = self.req_seq_lens.long()
        ends = torch.cumsum(q, 0)
        owner = torch.searchsorted(ends, self.token_ids, right=True)  # R for rows past the live tokens
        live = owner < q.shape[0]
        req = torch.where(live, owner, 0)
        first = (ends - q)[req]
        n_keys = s[req] - q[req] + (self.token_ids - first) + 1
        self.token_req.copy_(req)
        self.tok_len.copy_(torch.where(live, n_keys, 0))

    def token_metadata(self) -> None:
        self.build_token_metadata()

    def attention(self) -> None:
        self.token_metadata()
        self.launch_varlen(self.num_rows)


class LazyTokenMetadata(TokenMetadataOnDevice):
    """Buggy (lazy init): the per-token rows are derived only if the step has not done it yet.

    How it happens: the builder runs behind a have-initialised flag that ``prepare`` clears
    (vLLM #42444, #44253).  The warm-up derives the capture batch's rows and sets the flag; the
    capture skips the torch ops, so the graph replays with the warm-up batch's token rows.
    ``prepare`` writes the same allocation's head every step.  Expected: lazy-init on
    ``self.token_req`` / ``self.tok_len`` (views of ``self.meta``).
    """

    def token_metadata(self) -> None:
        if not self.tokens_built:
            self.build_token_metadata()
            self.tokens_built = True


# -- Triton: a planner whose buffers prepare clears (split-KV decode) -------------------------
class PlanClearedInPrepare(PlannedSplitKV):
    """Safe: ``prepare`` clears the scheduler buffers when it marks the plan stale; separate
    warm-up and graph states (``graphsafe.capturing()``), so the capture records the planner."""

    default_spec = CaptureSpec(max_reqs=4, max_query_len=1, max_seq_len=8, block_size=4)  # two splits

    def prepare(self, batch: Batch) -> None:
        super().prepare(batch)
        for st in (self.eager_state, self.graph_state):
            st.split_start.zero_()
            st.split_end.zero_()


class LazyPlanClearedInPrepare(PlanClearedInPrepare):
    """Buggy (lazy init): one scheduler state for warm-up and capture, cleared by ``prepare``.

    How it happens: as ``split_kv.LazyPlannedSplitKV`` (the warm-up plans and sets the flag,
    the capture skips the planner), but ``prepare`` also zeroes the plan when it invalidates
    it, so every step's ``prepare`` writes the buffers the graph reads: the replays see an
    empty plan.  Expected: lazy-init on ``self.eager_state.split_start`` / ``.split_end``.
    """

    def setup(self, spec: CaptureSpec, device) -> None:
        super().setup(spec, device)
        self.graph_state = self.eager_state

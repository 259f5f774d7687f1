"""Short idioms of sampling, MoE routing, speculative decoding, Mamba and paged attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .case import D, N, R, V, case

# -- sampling ------------------------------------------------------------------------------------------------


def _logits(self, device):
    self.logits = torch.zeros(N, V, device=device)
    self.temp = torch.ones(N, device=device)
    self.u = torch.zeros(N, device=device)


def _logits_refill(self, gen):
    self.logits.copy_(torch.randn(N, V, generator=gen) * 3)
    self.temp.copy_(torch.rand(N, generator=gen) + 0.5)
    self.u.copy_(torch.rand(N, generator=gen))


logits = {"more": _logits, "refill": _logits_refill}


@case("temperature_softmax", "sampling", **logits)
def _(s):
    return torch.softmax(s.logits / s.temp[:, None], dim=-1)


@case("top_k_mask", "sampling", **logits)
def _(s):
    kth = torch.topk(s.logits, 3, dim=-1).values[:, -1:]
    return s.logits.masked_fill(s.logits < kth, float("-inf"))


@case("top_p_mask", "sampling", **logits)
def _(s):
    """Sort, cumulative probability, mask, scatter back: the sync-free top-p."""
    probs, order = torch.sort(torch.softmax(s.logits, -1), dim=-1, descending=True)
    drop = (probs.cumsum(-1) - probs) > 0.8
    return torch.zeros_like(drop).scatter_(-1, order, drop)


@case("inverse_cdf_sample", "sampling", **logits)
def _(s):
    """A sample from given uniforms: searchsorted in the cumulative distribution."""
    cdf = torch.softmax(s.logits, -1).cumsum(-1)
    return torch.searchsorted(cdf, s.u[:, None].clamp(max=0.999)).clamp(max=V - 1)


@case("greedy_argmax", "sampling", **logits)
def _(s):
    return s.logits.argmax(-1)


@case("repetition_penalty", "sampling", **logits)
def _(s):
    seen = torch.zeros(N, V, device=s.device).scatter_(1, s.cats[:, None], 1.0) > 0
    return torch.where(seen & (s.logits > 0), s.logits / 1.2, torch.where(seen, s.logits * 1.2, s.logits))


# -- MoE ---------------------------------------------------------------------------------------------------


@case("topk_routing", "moe", **logits)
def _(s):
    w, ids = torch.topk(torch.softmax(s.logits[:, :R], -1), 2, dim=-1)
    return w / w.sum(-1, keepdim=True), ids


@case("sort_tokens_by_expert", "moe")
def _(s):
    order = torch.argsort(s.cats % R, stable=True)
    return s.x.index_select(0, order), order


@case("expert_counts_bincount", "moe")
def _(s):
    return torch.bincount(s.cats % R, minlength=R)


@case("expert_counts_histc", "moe")
def _(s):
    return torch.histc((s.cats % R).float(), bins=R, min=0, max=R - 1)


@case("expert_offsets_sync_free", "moe")
def _(s):
    counts = torch.zeros(R, dtype=torch.long, device=s.device).scatter_add_(0, s.cats % R, torch.ones_like(s.cats))
    return F.pad(counts.cumsum(0), (1, 0))


@case("combine_by_index_add", "moe")
def _(s):
    return torch.zeros_like(s.x).index_add_(0, s.idx, s.x * s.v[:, None])


@case("expert_loop_host_counts", "moe")
def _(s):
    """for e in range(R): rows of expert e selected with a boolean mask (a host sync per expert)."""
    out = torch.zeros_like(s.x)
    for e in range(R):
        sel = (s.cats % R) == e
        out[sel] = s.x[sel] * (e + 1)
    return out


# -- speculative decoding ----------------------------------------------------------------------------------


def _spec(self, device):
    self.draft = torch.zeros(R, 4, dtype=torch.long, device=device)
    self.target = torch.zeros(R, 5, dtype=torch.long, device=device)


def _spec_refill(self, gen):
    self.draft.copy_(torch.randint(0, 3, (R, 4), generator=gen))
    self.target.copy_(torch.randint(0, 3, (R, 5), generator=gen))


spec = {"more": _spec, "refill": _spec_refill}


@case("accepted_prefix_length", "spec_decode", **spec)
def _(s):
    """Accepted draft tokens: cumprod of matches, summed, all on the device."""
    return torch.cumprod((s.draft == s.target[:, :4]).long(), dim=1).sum(1)


@case("next_token_gather", "spec_decode", **spec)
def _(s):
    n_acc = torch.cumprod((s.draft == s.target[:, :4]).long(), dim=1).sum(1)
    return s.target.gather(1, n_acc[:, None]).squeeze(1)


@case("rejection_sample_accept", "spec_decode")
def _(s):
    p_t, p_d = torch.softmax(s.x, -1), torch.softmax(s.y, -1)
    ratio = (p_t / p_d).gather(1, s.cats[:, None] % D).squeeze(1)
    return torch.where(s.v.sigmoid() < ratio, s.cats, -1)


@case("accepted_tokens_masked_select", "spec_decode", **spec)
def _(s):
    """The accepted tokens as a flat list: masked_select, a size the host must read."""
    keep = torch.cumprod((s.draft == s.target[:, :4]).long(), dim=1).bool()
    return torch.masked_select(s.draft, keep)


@case("positions_from_counts", "spec_decode")
def _(s):
    """Per-token positions from per-request counts: arange minus the repeated request starts."""
    starts = F.pad(s.counts.cumsum(0)[:-1], (1, 0))
    return torch.arange(N, device=s.device) - torch.repeat_interleave(starts, s.counts, output_size=N)


# -- Mamba --------------------------------------------------------------------------------------------------


@case("selective_state_update", "mamba")
def _(s):
    dt = F.softplus(s.y)
    s.state.mul_(torch.exp(-dt)).add_(dt * s.x)
    return (s.state * s.v[:, None]).sum(-1)


@case("conv_state_roll", "mamba")
def _(s):
    s.state.copy_(torch.roll(s.state, -1, dims=1))
    s.state[:, -1] = s.v
    return s.state


@case("state_slots_gather_scatter", "mamba")
def _(s):
    """Recurrent states read and written back by slot index (a state pool)."""
    cur = s.state[s.perm[:R]]
    s.state[s.perm[:R]] = cur * 0.5 + s.x[:R]
    return s.state


@case("segsum_cumsum", "mamba")
def _(s):
    c = torch.cumsum(s.v, 0)
    seg = c[:, None] - c[None, :]
    return seg.masked_fill(~torch.ones(N, N, dtype=torch.bool, device=s.device).tril(), float("-inf"))


# -- paged attention ----------------------------------------------------------------------------------------


def _paged(self, device):
    self.cache = torch.zeros(8, 4, D, device=device)  # blocks of 4 rows
    self.table = torch.zeros(R, 2, dtype=torch.long, device=device)
    self.slots = torch.zeros(N, dtype=torch.long, device=device)


def _paged_refill(self, gen):
    self.cache.copy_(torch.randn(8, 4, D, generator=gen))
    self.table.copy_(torch.randperm(8, generator=gen).view(R, 2))
    self.slots.copy_(torch.randperm(32, generator=gen)[:N])


paged = {"more": _paged, "refill": _paged_refill}


@case("block_table_gather", "paged", **paged)
def _(s):
    return s.cache[s.table].reshape(R, 8, D)


@case("slot_mapping_write", "paged", **paged)
def _(s):
    s.cache.view(-1, D).index_copy_(0, s.slots, s.x)
    return s.cache


@case("decode_attention", "paged", **paged)
def _(s):
    k = s.cache[s.table].reshape(R, 8, D)
    scores = torch.einsum("rd,rkd->rk", s.x[:R], k) / D**0.5
    return torch.einsum("rk,rkd->rd", torch.softmax(scores, -1), k)

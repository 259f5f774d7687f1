"""Scans, sorts and reductions; random ops; dtype casts; the layers attention, MoE and Mamba use."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .case import D, N, V, case, has_op

# -- scans, sorts, reductions ---------------------------------------------------------------------------


@case("cumsum", "reduce")
def _(s):
    return torch.cumsum(s.x, dim=0)


@case("cumsum_int_counts", "reduce")
def _(s):
    """cu_seqlens from counts: cumsum in int64, padded with a leading 0."""
    return F.pad(torch.cumsum(s.counts, 0), (1, 0))


@case("cumsum_out", "reduce")
def _(s):
    return torch.cumsum(s.x, dim=1, out=s.out)


@case("cumprod", "reduce")
def _(s):
    return torch.cumprod(s.x.sigmoid(), dim=1)


@case("cummax", "reduce")
def _(s):
    return torch.cummax(s.x, dim=0)


@case("logcumsumexp", "reduce")
def _(s):
    return torch.logcumsumexp(s.x, dim=1)


@case("sort", "reduce")
def _(s):
    return torch.sort(s.x, dim=1, descending=True)


@case("sort_stable_ints", "reduce")
def _(s):
    return torch.sort(s.cats, stable=True)


@case("argsort", "reduce")
def _(s):
    return torch.argsort(s.v)


@case("topk", "reduce")
def _(s):
    return torch.topk(s.x, 3, dim=1)


@case("topk_host_k", "reduce")
def _(s):
    """topk with k = n, a host int prepare() changes: frozen at capture."""
    return torch.topk(s.v, s.n).values


@case("argmax", "reduce")
def _(s):
    return torch.argmax(s.x, dim=1)


@case("max_dim", "reduce")
def _(s):
    return torch.max(s.x, dim=0)


@case("kthvalue", "reduce")
def _(s):
    return torch.kthvalue(s.x, 2, dim=1)


@case("sum_all", "reduce")
def _(s):
    return s.x.sum()


@case("mean_keepdim", "reduce")
def _(s):
    return s.x.mean(dim=1, keepdim=True)


@case("amax", "reduce")
def _(s):
    return s.x.amax(dim=0)


@case("logsumexp", "reduce")
def _(s):
    return torch.logsumexp(s.x, dim=1)


@case("any_all", "reduce")
def _(s):
    return s.mask2.any(dim=1), s.mask2.all(dim=0)


@case("count_nonzero", "reduce")
def _(s):
    return torch.count_nonzero(s.mask2, dim=1)


@case("norm", "reduce")
def _(s):
    return torch.linalg.vector_norm(s.x, dim=1)


# -- random ---------------------------------------------------------------------------------------------


def _in_unit(outs, _inst):
    return bool(((outs[0] >= 0) & (outs[0] < 1)).all())


def _finite(outs, _inst):
    return bool(torch.isfinite(outs[0]).all())


def _in_vocab(outs, _inst):
    return bool(((outs[0] >= 0) & (outs[0] < V)).all())


def _zero_or_one(outs, _inst):
    return bool(((outs[0] == 0) | (outs[0] == 1)).all())


@case("rand", "random", check="fresh", valid=_in_unit)
def _(s):
    return torch.rand(N, D, device=s.device)


@case("randn", "random", check="fresh", valid=_finite)
def _(s):
    return torch.randn(N, D, device=s.device)


@case("randint", "random", check="fresh", valid=_in_vocab)
def _(s):
    return torch.randint(0, V, (N, D), device=s.device)


@case("rand_like", "random", check="fresh", valid=_in_unit)
def _(s):
    return torch.rand_like(s.x)


@case("uniform_", "random", check="fresh", valid=_in_unit)
def _(s):
    return s.out.uniform_(0.0, 1.0)


@case("normal_", "random", check="fresh", valid=_finite)
def _(s):
    return s.out.normal_()


@case("exponential_", "random", check="fresh", valid=_finite)
def _(s):
    return s.out.exponential_()


@case("bernoulli_fresh", "random", check="fresh", valid=_zero_or_one)
def _(s):
    return torch.bernoulli(torch.full((N, D), 0.5, device=s.device))


@case("bernoulli_certain", "random")
def _(s):
    """bernoulli(p) with p 0 or 1: the draw is determined by the new probabilities."""
    return torch.bernoulli(s.p01)


@case("dropout", "random", check="fresh", valid=lambda o, _i: bool(torch.isfinite(o[0]).all()))
def _(s):
    return F.dropout(s.x, p=0.5, training=True)


@case("multinomial_certain", "random")
def _(s):
    """multinomial over one-hot rows: the sample follows the new probabilities."""
    return torch.multinomial(s.onehot, 1)


@case("multinomial_fresh", "random", check="fresh", valid=_in_vocab)
def _(s):
    return torch.multinomial(torch.ones(N, V, device=s.device), 2)


@case("multinomial_with_replacement", "random", check="fresh", valid=_in_vocab)
def _(s):
    return torch.multinomial(torch.ones(N, V, device=s.device), 4, replacement=True)


@case("gumbel_argmax_sampling", "random")
def _(s):
    """argmax(probs / exponential noise): sampling without a host read; one-hot rows make it certain."""
    q = torch.empty_like(s.onehot).exponential_()
    return (s.onehot / q).argmax(dim=-1)


@case(
    "randperm",
    "random",
    check="fresh",
    valid=lambda o, _i: bool((o[0].sort().values == torch.arange(N, device=o[0].device)).all()),
)
def _(s):
    return torch.randperm(N, device=s.device)


def _private_gen(self, device):
    self.gen = torch.Generator(device=device)
    self.gen.manual_seed(1234)


@case("rand_private_generator", "random", more=_private_gen, check="fresh", valid=_in_unit)
def _(s):
    return torch.rand(N, D, device=s.device, generator=s.gen)


@case("multinomial_private_generator", "random", more=_private_gen, check="fresh", valid=_in_vocab)
def _(s):
    return torch.multinomial(torch.ones(N, V, device=s.device), 2, generator=s.gen)


@case("bernoulli_private_generator", "random", more=_private_gen, check="fresh", valid=_zero_or_one)
def _(s):
    return torch.bernoulli(torch.full((N, D), 0.5, device=s.device), generator=s.gen)


@case("exponential_private_generator", "random", more=_private_gen, check="fresh", valid=_finite)
def _(s):
    return s.out.exponential_(generator=s.gen)


# -- dtype casts -----------------------------------------------------------------------------------------


@case("to_half", "dtype")
def _(s):
    return s.x.to(torch.float16)


@case("to_bfloat16", "dtype")
def _(s):
    return s.x.to(torch.bfloat16)


@case("to_int32", "dtype")
def _(s):
    return s.idx.to(torch.int32)


@case("float_to_int_truncates", "dtype")
def _(s):
    return (s.x * 10).to(torch.int64)


@case("to_bool", "dtype")
def _(s):
    return s.p01.bool()


@case("to_float8_e4m3fn", "dtype", needs=has_op("torch.float8_e4m3fn"))
def _(s):
    return s.x.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)


@case("bitcast_view", "dtype")
def _(s):
    return s.x.view(torch.int32)


@case("type_as", "dtype")
def _(s):
    return s.counts.type_as(s.x)


@case("half_round_trip", "dtype")
def _(s):
    return s.x.half().float() - s.x


def _bf16_buf(self, device):
    self.buf = torch.zeros(N, D, dtype=torch.bfloat16, device=device)


@case("copy_casts", "dtype", more=_bf16_buf)
def _(s):
    """copy_ from float32 into a bfloat16 buffer."""
    return s.buf.copy_(s.x)


# -- layers -----------------------------------------------------------------------------------------------


@case("matmul", "layers")
def _(s):
    return s.x @ s.w


@case("linear_out", "layers")
def _(s):
    return torch.matmul(s.x, s.w, out=s.out)


@case("bmm", "layers")
def _(s):
    return torch.bmm(s.x.view(2, N // 2, D), s.y.view(2, N // 2, D).transpose(1, 2))


@case("softmax", "layers")
def _(s):
    return torch.softmax(s.x, dim=-1)


@case("layer_norm", "layers")
def _(s):
    return F.layer_norm(s.x, (D,))


@case("rms_norm_manual", "layers")
def _(s):
    return s.x * torch.rsqrt(s.x.pow(2).mean(-1, keepdim=True) + 1e-6)


@case("silu_and_mul", "layers")
def _(s):
    return F.silu(s.x) * s.y


@case("gelu_tanh", "layers")
def _(s):
    return F.gelu(s.x, approximate="tanh")


@case("sdpa_causal", "layers")
def _(s):
    q = s.x.view(2, 1, N // 2, D)
    return F.scaled_dot_product_attention(q, s.y.view(2, 1, N // 2, D), q, is_causal=True)


@case("conv1d_depthwise", "layers")
def _(s):
    """Mamba's causal depthwise conv over the sequence."""
    return F.conv1d(F.pad(s.x.t()[None], (3, 0)), s.w[:, None, :4], groups=D)


@case("attention_masked_softmax", "layers")
def _(s):
    scores = (s.x @ s.y.t()).masked_fill(~s.mask[None, :], float("-inf"))
    return torch.softmax(scores, dim=-1)


@case("manual_seed_in_forward", "random")
def _(s):
    """torch.manual_seed inside forward(): re-seeds the default generator of every device."""
    torch.manual_seed(0)
    return torch.rand(N, D, device=s.device)


@case("private_generator_reseeded_in_forward", "random", more=_private_gen)
def _(s):
    s.gen.manual_seed(7)
    return torch.rand(N, D, device=s.device, generator=s.gen)


@case("bucketize", "reduce")
def _(s):
    return torch.bucketize(s.x, torch.linspace(-2, 2, 9, device=s.device))

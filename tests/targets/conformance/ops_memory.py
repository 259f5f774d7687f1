"""Allocations inside the capture, state updated in place or rebound, views, ``_foreach_*`` and fills."""

from __future__ import annotations

import torch

from .case import D, N, case

# -- allocations inside the capture ------------------------------------------------------------------------


@case("empty_then_fill", "alloc")
def _(s):
    t = torch.empty(N, D, device=s.device)
    t.copy_(s.x)
    return t * 2.0


@case("zeros_then_scatter", "alloc")
def _(s):
    return torch.zeros(N, D, device=s.device).index_copy_(0, s.perm, s.x)


@case("ones_like", "alloc")
def _(s):
    return torch.ones_like(s.x) + s.x


@case("full", "alloc")
def _(s):
    return torch.full((N, D), 3.0, device=s.device) * s.x


@case("full_host_value", "alloc")
def _(s):
    """full((N, D), py_scale): a host float prepare() changes, frozen at capture."""
    return torch.full((N, D), s.py_scale, device=s.device) * s.x


@case("arange_fixed", "alloc")
def _(s):
    return torch.arange(N, device=s.device) + s.idx


@case("arange_host_bound", "alloc")
def _(s):
    """arange(n) with n a host int prepare() changes: the length is frozen."""
    return torch.arange(s.n, device=s.device).float().sum() * s.x


@case("linspace", "alloc")
def _(s):
    return torch.linspace(0, 1, N, device=s.device)[:, None] * s.x


@case("eye", "alloc")
def _(s):
    return torch.eye(D, device=s.device) @ s.w


@case("new_zeros", "alloc")
def _(s):
    return s.x.new_zeros(N).index_add_(0, s.idx, s.v)


@case("empty_like_uninitialised_then_written", "alloc")
def _(s):
    t = torch.empty_like(s.x)
    torch.mul(s.x, 3.0, out=t)
    return t


@case("temporary_returned_as_view", "alloc")
def _(s):
    return (s.x + s.y)[::2]


@case("stack_and_cat", "alloc")
def _(s):
    return torch.cat([torch.stack([s.x, s.y]).sum(0), s.x], dim=1)


# -- state updates ----------------------------------------------------------------------------------------


@case("add_in_place", "state")
def _(s):
    return s.state.add_(s.x)


@case("mul_in_place_host_scalar", "state")
def _(s):
    """state.mul_(py_scale): a host float prepare() changes, frozen."""
    return s.state.mul_(s.py_scale)


@case("decay_and_add_in_place", "state")
def _(s):
    """Mamba-style state update: state = state * decay + x, in place."""
    return s.state.mul_(torch.sigmoid(s.y)).add_(s.x)


@case("out_argument", "state")
def _(s):
    return torch.add(s.x, s.y, out=s.out)


@case("copy_into_state", "state")
def _(s):
    s.state.copy_(s.x * 2.0)
    return s.state


@case("rebound_out_of_place", "state")
def _(s):
    """self.state = self.state + x: forward() rebinds the attribute to a tensor the graph made."""
    s.state = s.state + s.x
    return s.state


@case("counter_on_device", "state")
def _(s):
    """A device counter incremented by every call (prepare() resets it)."""
    s.n_dev.add_(1)
    return s.n_dev


@case("python_counter", "state")
def _(s):
    """A Python counter incremented by every call: the graph keeps the capture's value."""
    s.calls = getattr(s, "calls", 0) + 1
    return s.x * s.calls


def _rebinding_refill(self, gen):
    if hasattr(self, "fresh"):
        self.kept = [*getattr(self, "kept", []), self.fresh]
    self.fresh = torch.randn(N, D, generator=gen).to(self.device)


@case("prepare_rebinds_input_kept_alive", "state", refill=_rebinding_refill)
def _(s):
    """prepare() binds a new tensor each step (the old one stays alive): the graph reads the old one."""
    return s.fresh * 2.0


def _freeing_refill(self, gen):
    self.fresh = torch.randn(N, D, generator=gen).to(self.device)


@case("prepare_rebinds_input_freed", "state", refill=_freeing_refill)
def _(s):
    """prepare() binds a new tensor each step and the old one is freed: the graph reads freed memory."""
    return s.fresh * 2.0


# -- views -------------------------------------------------------------------------------------------------


@case("as_strided", "views")
def _(s):
    return torch.as_strided(s.x, (N // 2, D), (2 * D, 1)) * 1.0


@case("narrow", "views")
def _(s):
    return s.x.narrow(0, 2, 5) * 1.0


@case("narrow_host_length", "views")
def _(s):
    """narrow(0, 0, n) with a host n prepare() changes: the view's size is frozen."""
    return s.x.narrow(0, 0, s.n).sum(0)


@case("transpose_contiguous", "views")
def _(s):
    return s.x.t().contiguous()


@case("permute_reshape", "views")
def _(s):
    return s.x.view(4, 4, D).permute(2, 0, 1).reshape(D, N)


@case("expand_contiguous", "views")
def _(s):
    return s.v[:, None].expand(N, D).contiguous()


@case("unfold", "views")
def _(s):
    return s.v.unfold(0, 4, 2).sum(-1)


@case("diagonal", "views")
def _(s):
    return torch.diagonal(s.x[:D]) * 1.0


@case("select_and_squeeze", "views")
def _(s):
    return s.x[None, 2].squeeze(0) + s.x.select(0, 5)


@case("chunk", "views")
def _(s):
    a, b = s.x.chunk(2, dim=1)
    return a * b


@case("write_through_view", "views")
def _(s):
    """A write into a view reaches the base buffer."""
    s.x.view(-1)[::3].mul_(-1.0)
    return s.x


@case("out_into_view", "views")
def _(s):
    torch.mul(s.x[:, :4], 2.0, out=s.out[:, 4:])
    return s.out


@case("flatten_unflatten", "views")
def _(s):
    return s.x.flatten().unflatten(0, (D, N)).sum(0)


# -- _foreach_ -------------------------------------------------------------------------------------------


@case("foreach_add_", "foreach")
def _(s):
    torch._foreach_add_([s.x, s.y], [s.v[:, None].expand(N, D), s.x])
    return s.x, s.y


@case("foreach_add_scalar_", "foreach")
def _(s):
    torch._foreach_add_([s.x, s.y], 1.5)
    return s.x, s.y


@case("foreach_mul_host_scalar_", "foreach")
def _(s):
    """_foreach_mul_ by py_scale, a host float prepare() changes."""
    torch._foreach_mul_([s.x, s.y], s.py_scale)
    return s.x, s.y


@case("foreach_copy_", "foreach")
def _(s):
    torch._foreach_copy_([s.out, s.state], [s.x, s.y])
    return s.out, s.state


@case("foreach_zero_", "foreach")
def _(s):
    torch._foreach_zero_([s.out, s.state])
    return s.out, s.state


@case("foreach_add_out_of_place", "foreach")
def _(s):
    return tuple(torch._foreach_add([s.x, s.y], [s.y, s.x]))


@case("foreach_norm", "foreach")
def _(s):
    return tuple(torch._foreach_norm([s.x, s.y]))


@case("foreach_lerp_", "foreach")
def _(s):
    torch._foreach_lerp_([s.state], [s.x], 0.25)
    return s.state


@case("foreach_addcmul_", "foreach")
def _(s):
    torch._foreach_addcmul_([s.state], [s.x], [s.y], value=0.5)
    return s.state


# -- fill, zero, copy --------------------------------------------------------------------------------------


@case("fill_scalar", "fill")
def _(s):
    return s.out.fill_(2.5)


@case("fill_host_value", "fill")
def _(s):
    """fill_(py_scale): a host float prepare() changes, frozen at capture."""
    return s.out.fill_(s.py_scale)


@case("fill_device_scalar", "fill")
def _(s):
    """fill_(0-dim device tensor): the value is read on the device."""
    return s.out.fill_(s.scalar)


@case("zero_", "fill")
def _(s):
    s.state.zero_()
    return s.state + s.x


@case("copy_broadcast_row", "fill")
def _(s):
    return s.out.copy_(s.v[:D])


@case("copy_broadcast_column", "fill")
def _(s):
    return s.out.copy_(s.v[:, None])


@case("copy_from_expanded_scalar", "fill")
def _(s):
    return s.out.copy_(s.scalar.expand(N, D))


@case("copy_from_int_to_float", "fill")
def _(s):
    return s.out.copy_(s.cats[:, None])


@case("zero_tail_by_host_n", "fill")
def _(s):
    """out[n:].zero_() with a host n prepare() changes: the padding bound is frozen."""
    s.out.copy_(s.x)
    s.out[s.n :].zero_()
    return s.out


@case("zero_tail_by_device_mask", "fill")
def _(s):
    """The sync-free padding: rows at or past n_dev zeroed by a device comparison."""
    rows = torch.arange(N, device=s.device)[:, None]
    return s.out.copy_(torch.where(rows < s.n_dev, s.x, 0.0))


@case("python_branch_on_host_int", "state")
def _(s):
    """if n > 4: a Python branch on a host int prepare() changes: the graph keeps the capture's branch."""
    if s.n > 4:
        return s.x * 2.0
    return s.x * 3.0

"""Indexing, scatter and gather, masks, and ops whose output size depends on the data."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .case import D, N, R, V, case, has_op

# -- indexing --------------------------------------------------------------------------------------------


@case("rows_by_index_tensor", "indexing")
def _(s):
    """x[idx]: advanced indexing by a device index tensor (aten::index)."""
    return s.x[s.idx]


@case("columns_by_index_tensor", "indexing")
def _(s):
    return s.x[:, s.idx[:D] % D]


@case("two_index_tensors", "indexing")
def _(s):
    return s.x[s.idx, s.idx % D]


@case("slice_then_index", "indexing")
def _(s):
    return s.x[2:10][s.idx[:4] % 8]


@case("int_row", "indexing")
def _(s):
    """x[3]: a basic index, a view."""
    return s.x[3] * 1.0


@case("index_by_bool_mask", "indexing")
def _(s):
    """x[mask]: the output's size is the mask's count (a nonzero inside)."""
    return s.x[s.mask]


@case("setitem_bool_mask_scalar", "indexing")
def _(s):
    """x[mask] = 0: index_put_ with a boolean index."""
    s.x[s.mask] = 0.0
    return s.x


@case("setitem_index_tensor_scalar", "indexing")
def _(s):
    """x[perm[:4]] = 0: index_put_ with a Python scalar value."""
    s.x[s.perm[:4]] = 0.0
    return s.x


@case("setitem_index_tensor_rows", "indexing")
def _(s):
    s.x[s.perm] = s.y
    return s.x


@case("setitem_slice_scalar", "indexing")
def _(s):
    s.x[4:] = -1.0
    return s.x


@case("setitem_slice_host_n", "indexing")
def _(s):
    """x[n:] = 0 with n a host int that prepare() changes: the slice is frozen at capture."""
    s.x[s.n :] = 0.0
    return s.x


@case("setitem_slice_tensor", "indexing")
def _(s):
    s.x[:, :4] = s.y[:, 4:]
    return s.x


@case("index_put_", "indexing")
def _(s):
    return s.x.index_put_((s.perm,), s.y)


@case("index_put_accumulate", "indexing")
def _(s):
    """index_put_(accumulate=True) with repeated indices (atomics on a GPU)."""
    return s.x.index_put_((s.idx,), s.y, accumulate=True)


@case("index_put_out_of_place", "indexing")
def _(s):
    return torch.index_put(s.x, (s.perm, s.perm % D), s.v)


@case("index_put_2d_accumulate", "indexing")
def _(s):
    return s.x.index_put_((s.idx, s.cats % D), s.v, accumulate=True)


@case("index_put_bool_mask_tensor_value", "indexing")
def _(s):
    """index_put_ with a boolean mask index and a 0-dim device value."""
    return s.x.index_put_((s.mask2,), s.scalar)


@case("masked_index_by_where", "indexing")
def _(s):
    """The sync-free way of x[mask] = 0: where(mask, 0, x) into x."""
    return s.x.copy_(torch.where(s.mask[:, None], 0.0, s.x))


# -- scatter and gather ----------------------------------------------------------------------------------


@case("gather", "scatter")
def _(s):
    return torch.gather(s.x, 1, s.idx[:, None].expand(N, D) % D)


@case("scatter_", "scatter")
def _(s):
    return s.out.scatter_(0, s.perm[:, None].expand(N, D), s.x)


@case("scatter_value", "scatter")
def _(s):
    return s.out.scatter_(1, (s.cats % D)[:, None], 1.0)


@case("scatter_add_", "scatter")
def _(s):
    return s.out.scatter_add_(0, s.idx[:, None].expand(N, D), s.x)


@case("scatter_reduce_amax", "scatter")
def _(s):
    return s.out.scatter_reduce_(0, s.idx[:, None].expand(N, D), s.x, reduce="amax", include_self=False)


@case("scatter_out_of_place", "scatter")
def _(s):
    return torch.scatter(s.x, 0, s.perm[:, None].expand(N, D), s.y)


@case("index_select", "scatter")
def _(s):
    return torch.index_select(s.x, 0, s.idx)


@case("index_add_", "scatter")
def _(s):
    return s.out.index_add_(0, s.idx, s.x)


@case("index_copy_", "scatter")
def _(s):
    return s.out.index_copy_(0, s.perm, s.x)


@case("index_fill_", "scatter")
def _(s):
    return s.x.index_fill_(0, s.perm[:4], 7.0)


@case("take", "scatter")
def _(s):
    return torch.take(s.x, s.idx * D + s.cats % D)


@case("take_along_dim", "scatter")
def _(s):
    return torch.take_along_dim(s.x, (s.idx % D)[:, None], dim=1)


@case("embedding", "scatter")
def _(s):
    return F.embedding(s.cats % D, s.w)


@case("kv_cache_write_by_slot", "scatter")
def _(s):
    """A KV-cache write: state[slot_mapping] = new rows (index_copy_ through a flattened view)."""
    s.state.view(N, D).index_copy_(0, s.perm, s.x)
    return s.state


# -- masks ------------------------------------------------------------------------------------------------


@case("masked_fill", "masks")
def _(s):
    return s.x.masked_fill(s.mask2, -1.0)


@case("masked_fill_", "masks")
def _(s):
    return s.x.masked_fill_(s.mask[:, None], float("-inf"))


@case("masked_fill_device_value", "masks")
def _(s):
    """masked_fill with a 0-dim device tensor as the value."""
    return s.x.masked_fill(s.mask2, s.scalar)


@case("where", "masks")
def _(s):
    return torch.where(s.mask2, s.x, s.y)


@case("where_scalar", "masks")
def _(s):
    return torch.where(s.mask2, s.x, 0.0)


@case("masked_scatter", "masks")
def _(s):
    """masked_scatter: the source is read in mask order."""
    return s.x.masked_scatter(s.mask2, s.y)


@case("clamp_by_tensors", "masks")
def _(s):
    return torch.clamp(s.x, min=-s.y.abs(), max=s.y.abs())


@case("nan_to_num", "masks")
def _(s):
    return torch.nan_to_num(s.x.log(), nan=0.0, neginf=-1.0)


# -- data-dependent output sizes --------------------------------------------------------------------------


@case("repeat_interleave_no_output_size", "dynamic")
def _(s):
    """repeat_interleave(ids, counts): the total is read back to the host."""
    ids = torch.arange(R, device=s.device)
    return torch.repeat_interleave(ids, s.counts)


@case("repeat_interleave_output_size", "dynamic")
def _(s):
    """repeat_interleave(ids, counts, output_size=N): no host read; the total is given."""
    ids = torch.arange(R, device=s.device)
    return torch.repeat_interleave(ids, s.counts, output_size=N)


@case("repeat_interleave_rows_output_size", "dynamic")
def _(s):
    return torch.repeat_interleave(s.x[:R], s.counts, dim=0, output_size=N)


@case("repeat_interleave_counts_only_output_size", "dynamic")
def _(s):
    return torch.repeat_interleave(s.counts, output_size=N)


@case("repeat_interleave_int", "dynamic")
def _(s):
    """repeat_interleave(x, 2, dim=1): a host int repeat count, no host read (GQA head expansion)."""
    return s.x.repeat_interleave(2, dim=1)


@case("nonzero", "dynamic")
def _(s):
    return torch.nonzero(s.mask)


@case("nonzero_static", "dynamic", needs=has_op("torch.nonzero_static"))
def _(s):
    """nonzero_static(mask, size=N): a fixed output size, padded with -1."""
    return torch.nonzero_static(s.mask, size=N)


@case("argwhere", "dynamic")
def _(s):
    return torch.argwhere(s.mask)


@case("where_one_argument", "dynamic")
def _(s):
    return torch.where(s.mask)


@case("masked_select", "dynamic")
def _(s):
    return torch.masked_select(s.x, s.mask2)


@case("unique", "dynamic")
def _(s):
    return torch.unique(s.cats)


@case("unique_consecutive", "dynamic")
def _(s):
    return torch.unique_consecutive(torch.sort(s.cats).values)


@case("bincount_minlength", "dynamic")
def _(s):
    """bincount(cats, minlength=V): the output size depends on the largest value."""
    return torch.bincount(s.cats, minlength=V)


@case("histc_fixed_range", "dynamic")
def _(s):
    return torch.histc(s.x, bins=V, min=-3.0, max=3.0)


@case("one_hot_num_classes", "dynamic")
def _(s):
    return F.one_hot(s.cats, V)


@case("one_hot_inferred_classes", "dynamic")
def _(s):
    """one_hot without num_classes: the class count is the largest value, read back."""
    return F.one_hot(s.cats)


@case("counts_by_scatter_add", "dynamic")
def _(s):
    """The sync-free bincount: zeros(V).scatter_add_(0, cats, ones)."""
    return torch.zeros(V, dtype=torch.long, device=s.device).scatter_add_(0, s.cats, torch.ones_like(s.cats))


@case("split_by_device_sizes", "dynamic")
def _(s):
    """split(x, counts.tolist()): the sizes are read back to the host."""
    return torch.cat([p.sum(0, keepdim=True) for p in torch.split(s.x, s.counts.tolist())])


@case("split_fixed_sizes", "dynamic")
def _(s):
    return torch.cat([p.sum(0, keepdim=True) for p in torch.split(s.x, [2, 6, 8])])


@case("narrow_by_device_length", "dynamic")
def _(s):
    """x[: n_dev.item()]: a slice bound read from the device."""
    return s.x[: int(s.n_dev.item())] * 2.0


@case("searchsorted", "dynamic")
def _(s):
    cum = torch.cumsum(s.counts, 0)
    return torch.searchsorted(cum, torch.arange(N, device=s.device), right=True)


@case("index_put_accumulate_int", "indexing")
def _(s):
    """Integer index_put_(accumulate=True): exact counts whatever the order."""
    hist = torch.zeros(V, dtype=torch.long, device=s.device)
    return hist.index_put_((s.cats,), torch.ones_like(s.cats), accumulate=True)

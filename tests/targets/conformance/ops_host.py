"""Host and device memory: copies both ways (pinned and pageable), host reads of device data, tensors
made from host data inside ``forward()``, and host values a device op takes."""

from __future__ import annotations

import torch

from .case import D, N, case, pin

# -- host <-> device -------------------------------------------------------------------------------------


def _host_buffers(self, device):
    self.h_pinned = torch.zeros(N, D, pin_memory=pin())
    self.h_pageable = torch.zeros(N, D)
    self.h_lens = torch.zeros(4, dtype=torch.long)
    self.h_const = torch.tensor([2.0])


def _host_refill(self, gen):
    self.h_pinned.copy_(torch.randn(N, D, generator=gen))
    self.h_pageable.copy_(torch.randn(N, D, generator=gen))
    self.h_lens.copy_(torch.randint(1, N, (4,), generator=gen))


host = {"more": _host_buffers, "refill": _host_refill}


@case("tensor_from_list_on_device", "host")
def _(s):
    """torch.tensor(list, device=...): a copy from pageable host memory inside the capture."""
    return s.x[:3] * torch.tensor([1.0, 2.0, 3.0], device=s.device)[:, None]


@case("tensor_from_host_ints_on_device", "host")
def _(s):
    """torch.tensor([n], device=...) with n a host int prepare() changes."""
    return s.x[0] * torch.tensor([s.n], device=s.device)


@case("as_tensor_from_list_on_device", "host")
def _(s):
    return s.v[:4] + torch.as_tensor([1, 2, 3, 4], device=s.device)


@case("tensor_scalar_on_device", "host")
def _(s):
    return s.x * torch.tensor(2.0, device=s.device)


@case("new_tensor_from_list", "host")
def _(s):
    return s.v[:2] * s.v.new_tensor([3.0, 4.0])


@case("tensor_from_list_then_to_device", "host")
def _(s):
    return s.x[:2] + torch.tensor([[1.0], [2.0]]).to(s.device)


@case("tensor_from_list_to_device_non_blocking", "host")
def _(s):
    return s.x[:2] + torch.tensor([[1.0], [2.0]]).to(s.device, non_blocking=True)


@case("host_tensor_used_only_on_host", "host")
def _(s):
    """torch.tensor(list) without a device, used only on the host: nothing reaches the graph but a Python float."""
    t = torch.tensor([1.0, 2.0, 3.0])
    return s.x * float(t.sum())


@case("copy_from_pinned_non_blocking", "host", **host)
def _(s):
    """device.copy_(pinned host buffer, non_blocking=True): the staging copy serving engines capture."""
    return s.out.copy_(s.h_pinned, non_blocking=True)


@case("copy_from_pinned_blocking", "host", **host)
def _(s):
    return s.out.copy_(s.h_pinned)


@case("copy_from_pageable", "host", **host)
def _(s):
    return s.out.copy_(s.h_pageable)


@case("copy_from_pageable_non_blocking", "host", **host)
def _(s):
    return s.out.copy_(s.h_pageable, non_blocking=True)


@case("to_device_from_pinned_non_blocking", "host", **host)
def _(s):
    return s.h_pinned.to(s.device, non_blocking=True) * 2.0


@case("copy_to_pinned_non_blocking", "host", **host)
def _(s):
    """pinned host buffer.copy_(device, non_blocking=True), then a device op."""
    s.h_pinned.copy_(s.x, non_blocking=True)
    return s.x * 2.0


@case("cpu", "host")
def _(s):
    """x.cpu(): a blocking device-to-host copy."""
    return s.x * float(s.x.cpu()[0, 0] != 0)


@case("to_host_non_blocking", "host")
def _(s):
    return s.x * 0.0 + s.x.to("cpu", non_blocking=True).to(s.device, non_blocking=True)


@case("item", "host")
def _(s):
    """x.max().item() on device data produced inside the graph."""
    return s.x * s.x.max().item()


@case("item_of_input", "host")
def _(s):
    """.item() of a device buffer prepare() wrote."""
    return s.x * s.scalar.item()


@case("tolist", "host")
def _(s):
    return s.x * sum(s.counts.tolist())


@case("int_of_tensor", "host")
def _(s):
    return s.x[: int(s.n_dev[0])]


@case("float_of_tensor", "host")
def _(s):
    return s.x * float(s.v[0])


@case("bool_branch", "host")
def _(s):
    """if (x > 0).any(): a branch on device data."""
    if (s.x > 0).any():
        return s.x * 2.0
    return s.x


@case("equal", "host")
def _(s):
    return s.x * float(torch.equal(s.x, s.y))


@case("allclose", "host")
def _(s):
    return s.x * float(torch.allclose(s.x, s.y))


@case("numpy", "host")
def _(s):
    return s.x * float(s.x.detach().cpu().numpy().sum() > 0)


@case("host_read_of_host_buffer", "host", **host)
def _(s):
    """int(h_lens[0]) of a host buffer prepare() rewrites: the value is frozen at capture."""
    return s.x[: int(s.h_lens[0])] * 1.0


@case("host_read_of_constant_host_buffer", "host", **host)
def _(s):
    """float(h_const) of a host buffer only setup() writes: frozen, and always right."""
    return s.x * float(s.h_const)


@case("host_op_on_host_buffer", "host", **host)
def _(s):
    """A host op on a host buffer inside forward(), its result used as a Python number."""
    return s.x * float(s.h_lens.sum().clamp(max=1))


# -- more host values -------------------------------------------------------------------------------------


@case("from_numpy_to_device", "host")
def _(s):
    import numpy as np

    return s.x[:2] + torch.from_numpy(np.array([[1.0], [2.0]], dtype=np.float32)).to(s.device)


@case("fill_from_host_0dim", "host")
def _(s):
    """fill_(a 0-dim host tensor): its value is read on the host at capture."""
    return s.out.fill_(torch.tensor(1.5))


@case("copy_from_host_0dim", "host")
def _(s):
    return s.out.copy_(torch.tensor(1.5))


@case("add_host_0dim_tensor", "host")
def _(s):
    """x + torch.tensor(2.0): a 0-dim host tensor taken as a scalar by a device op."""
    return s.x + torch.tensor(2.0)

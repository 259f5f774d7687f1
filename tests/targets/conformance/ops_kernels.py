"""Triton launches with host scalars, constexprs and grids; ``torch.compile``d functions."""

from __future__ import annotations

import functools
import shutil

import torch

from .case import D, N, case

try:  # the Triton interpreter must be on before kernels are defined (on a machine without a GPU)
    import triton
    import triton.language as tl
except Exception:  # pragma: no cover - no triton here: the cases say so
    triton = None


def _needs_triton() -> str | None:
    return None if triton is not None else "triton is not installed"


if triton is not None:

    @triton.jit
    def _scale(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale, mask=m)

    @triton.jit
    def _scale_device_n(x_ptr, out_ptr, n_ptr, scale, BLOCK: tl.constexpr, COLS: tl.constexpr):
        n = tl.load(n_ptr) * COLS
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale, mask=m)

    @triton.jit
    def _rows_atomic_add(x_ptr, idx_ptr, out_ptr, COLS: tl.constexpr):
        row = tl.program_id(0)
        dst = tl.load(idx_ptr + row)
        cols = tl.arange(0, COLS)
        tl.atomic_add(out_ptr + dst * COLS + cols, tl.load(x_ptr + row * COLS + cols))

    @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
    @triton.jit
    def _scale_tuned(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale, mask=m)

    @triton.jit
    def _gather_rows(x_ptr, idx_ptr, out_ptr, COLS: tl.constexpr):
        row = tl.program_id(0)
        src = tl.load(idx_ptr + row).to(tl.int64)
        cols = tl.arange(0, COLS)
        tl.store(out_ptr + row * COLS + cols, tl.load(x_ptr + src * COLS + cols))


def _launch(kernel, grid, *args, **kw):
    kernel[grid](*args, **kw)


@case("fixed_grid_and_scalars", "triton", needs=_needs_triton)
def _(s):
    _launch(_scale, (N * D // 32,), s.x, s.out, N * D, 2.0, BLOCK=32)
    return s.out


@case("host_scalar_constant", "triton", needs=_needs_triton)
def _(s):
    _launch(_scale, (N * D // 32,), s.x, s.out, N * D, 0.5, BLOCK=32)
    return s.out


@case("host_scalar_changes", "triton", needs=_needs_triton)
def _(s):
    """A host float argument prepare() changes: frozen at capture."""
    _launch(_scale, (N * D // 32,), s.x, s.out, N * D, s.py_scale, BLOCK=32)
    return s.out


@case("host_length_changes", "triton", needs=_needs_triton)
def _(s):
    """The element count n * D as a host int prepare() changes: frozen at capture."""
    _launch(_scale, (N * D // 32,), s.x, s.out, s.n * D, 2.0, BLOCK=32)
    return s.out


@case("grid_from_host_length", "triton", needs=_needs_triton)
def _(s):
    """One program per live row, the grid from a host n prepare() changes: frozen at capture."""
    _launch(_scale, (s.n,), s.x, s.out, N * D, 2.0, BLOCK=D)
    return s.out


@case("device_length", "triton", needs=_needs_triton)
def _(s):
    """The live length loaded from device memory: the graph follows it."""
    _launch(_scale_device_n, (N * D // 32,), s.x, s.out, s.n_dev, 2.0, BLOCK=32, COLS=D)
    return s.out


@case("constexpr_block", "triton", needs=_needs_triton)
def _(s):
    _launch(_scale, (N * D // 64,), s.x, s.out, N * D, 2.0, BLOCK=64)
    return s.out


@case("autotuned", "triton", needs=_needs_triton)
def _(s):
    _scale_tuned[lambda m: (triton.cdiv(N * D, m["BLOCK"]),)](s.x, s.out, N * D, 3.0)
    return s.out


@case("atomic_add", "triton", needs=_needs_triton)
def _(s):
    _launch(_rows_atomic_add, (N,), s.x, s.idx, s.out, COLS=D)
    return s.out


@case("gather_rows_by_device_index", "triton", needs=_needs_triton)
def _(s):
    _launch(_gather_rows, (N,), s.x, s.idx, s.out, COLS=D)
    return s.out


@case("kernel_on_a_view", "triton", needs=_needs_triton)
def _(s):
    """A launch on a view with a storage offset: the pointer is the view's."""
    _launch(_scale, (D * 4 // 32,), s.x[4:8], s.out[8:12], D * 4, 2.0, BLOCK=32)
    return s.out


# -- torch.compile ------------------------------------------------------------------------------------------


def _needs_compile() -> str | None:
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    if not torch.cuda.is_available() and shutil.which("cc") is None and shutil.which("gcc") is None:
        return "torch.compile on the CPU needs a C compiler and none is on PATH"
    return None


def _gated(x, y):
    return torch.nn.functional.silu(x) * y + 1.0


def _row_softmax_scaled(x, scale):
    return torch.softmax(x * scale, dim=-1)


@functools.cache
def _compiled(fn_name: str, backend: str):
    return torch.compile({"gated": _gated, "softmax": _row_softmax_scaled}[fn_name], backend=backend, dynamic=False)


@case("inductor_elementwise", "compile", needs=_needs_compile)
def _(s):
    return _compiled("gated", "inductor")(s.x, s.y)


@case("inductor_reduction", "compile", needs=_needs_compile)
def _(s):
    return _compiled("softmax", "inductor")(s.x, 2.0)


@case("inductor_host_scalar_changes", "compile", needs=_needs_compile)
def _(s):
    """A compiled function given a host float prepare() changes: the graph keeps the capture's value."""
    return _compiled("softmax", "inductor")(s.x, s.py_scale)


@case("aot_eager", "compile", needs=_needs_compile)
def _(s):
    return _compiled("gated", "aot_eager")(s.x, s.y)


@case("inductor_writes_state", "compile", needs=_needs_compile)
def _(s):
    s.state.copy_(_compiled("gated", "inductor")(s.state, s.x))
    return s.state

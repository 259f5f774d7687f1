"""The Triton kernel behind :mod:`graphsafe.capture.gpu_verdict` (imported at first use, so that importing
graphsafe defines no kernel and ``TRITON_INTERPRET`` is decided before triton's first import)."""

import triton
import triton.language as tl


@triton.jit
def _count_pair(g_ptr, e_ptr, n, out_ptr, rtol, atol, MODE: tl.constexpr, BLOCK: tl.constexpr):
    # MODE 0: exact (integers, booleans); 1: floats bitwise (NaN equals NaN); 2: floats close
    start = tl.program_id(0).to(tl.int64) * BLOCK
    if start < n:  # the grid fits the longest pair of the launch
        offs = start + tl.arange(0, BLOCK)
        inside = offs < n
        g = tl.load(g_ptr + offs, mask=inside)  # lanes outside are not counted (no ``other``: fp8 has no literal)
        e = tl.load(e_ptr + offs, mask=inside)
        if MODE == 0:
            ok = g == e
        else:
            gf = g.to(tl.float32)
            ef = e.to(tl.float32)
            ok = (gf == ef) | ((gf != gf) & (ef != ef))
            if MODE == 2:
                d = tl.abs(gf - ef)
                ok = ok | ((d <= atol + rtol * tl.abs(ef)) & (d < float("inf")))
        bad = tl.where(inside & (ok == 0), 1, 0)
        tl.atomic_add(out_ptr, tl.sum(bad, axis=0).to(tl.int64))


# One kernel per number of places (1, 2, 4): a launch's host time grows with its arguments (on an H100
# host a one-pair launch of the four-place kernel cost 68 us, of a one-place kernel 27 us), and most steps
# compare one or two pairs.  One pair per program row (axis 1); MODE -1: no pair in that place.  Lengths are
# not specialised on (every step's live rows have a length of their own: no compilation per length).
@triton.jit(do_not_specialize=["n0"])
def _count_bad1(out_ptr, g0, e0, n0, r0, a0, M0: tl.constexpr, BLOCK: tl.constexpr):
    _count_pair(g0, e0, n0, out_ptr, r0, a0, M0, BLOCK)


@triton.jit
def _two_places(
    pair,
    FIRST: tl.constexpr,
    out_ptr,
    g0,
    e0,
    n0,
    r0,
    a0,
    g1,
    e1,
    n1,
    r1,
    a1,
    M0: tl.constexpr,
    M1: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # places FIRST and FIRST + 1 of a launch: the program row ``pair`` counts its own
    if M0 >= 0:
        if pair == FIRST:
            _count_pair(g0, e0, n0, out_ptr + FIRST, r0, a0, M0, BLOCK)
    if M1 >= 0:
        if pair == FIRST + 1:
            _count_pair(g1, e1, n1, out_ptr + FIRST + 1, r1, a1, M1, BLOCK)


@triton.jit(do_not_specialize=["n0", "n1"])
def _count_bad2(
    out_ptr, g0, e0, n0, r0, a0, g1, e1, n1, r1, a1, M0: tl.constexpr, M1: tl.constexpr, BLOCK: tl.constexpr
):
    _two_places(tl.program_id(1), 0, out_ptr, g0, e0, n0, r0, a0, g1, e1, n1, r1, a1, M0, M1, BLOCK)


@triton.jit(do_not_specialize=["n0", "n1", "n2", "n3"])
def _count_bad4(
    out_ptr,
    g0,
    e0,
    n0,
    r0,
    a0,
    g1,
    e1,
    n1,
    r1,
    a1,
    g2,
    e2,
    n2,
    r2,
    a2,
    g3,
    e3,
    n3,
    r3,
    a3,
    M0: tl.constexpr,
    M1: tl.constexpr,
    M2: tl.constexpr,
    M3: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pair = tl.program_id(1)
    _two_places(pair, 0, out_ptr, g0, e0, n0, r0, a0, g1, e1, n1, r1, a1, M0, M1, BLOCK)
    _two_places(pair, 2, out_ptr, g2, e2, n2, r2, a2, g3, e3, n3, r3, a3, M2, M3, BLOCK)


#: the kernel for each number of places
KERNELS = {1: _count_bad1, 2: _count_bad2, 4: _count_bad4}

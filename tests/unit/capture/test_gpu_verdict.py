"""The one-launch closeness count (a GPU's per-step verdict) tests what the torch comparison tests.

On a machine without a GPU the kernel runs in the Triton interpreter on CPU tensors; on a GPU, compiled.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsafe.capture import compare as compare_module
from graphsafe.capture import gpu_verdict
from graphsafe.capture.compare import tolerances, verdicts

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FLOATS = [torch.float32, torch.float16, torch.bfloat16] + ([torch.float8_e4m3fn] if DEVICE == "cuda" else [])
SPECIAL = [0.0, -0.0, 1.0, -2.5, 1e-6, 3e4, float("nan"), float("inf"), float("-inf")]
CHANGES = ["same", "ulp", "small", "large", "nan", "inf", "neg"]


def _pair(dtype, values, changes):
    g = torch.tensor(values, dtype=torch.float32)
    e = g.clone()
    for i, c in enumerate(changes):
        if c == "ulp":
            e[i] = torch.nextafter(g[i], torch.tensor(10.0))
        elif c == "small":
            e[i] = g[i] * (1 + 1e-7) + 1e-7
        elif c == "large":
            e[i] = g[i] + 1.0
        elif c in ("nan", "inf"):
            e[i] = float(c)
        elif c == "neg":
            e[i] = -g[i]
    return g.to(dtype).to(DEVICE), e.to(dtype).to(DEVICE)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN and inf arithmetic in the interpreter
@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(FLOATS),
    bitwise=st.booleans(),
    data=st.lists(
        st.tuples(st.one_of(st.sampled_from(SPECIAL), st.floats(-1e4, 1e4, width=32)), st.sampled_from(CHANGES)),
        min_size=1,
        max_size=40,
    ),
)
def test_the_count_is_the_number_of_elements_the_torch_comparison_finds_not_close(dtype, bitwise, data):
    g, e = _pair(dtype, [v for v, _ in data], [c for _, c in data])
    r, a = tolerances(dtype)
    expected = int((~compare_module._close(g, e, r, a, bitwise)).sum())
    assert gpu_verdict.count_bad([(g, e, r, a, bitwise)]).tolist() == [expected]


def test_integers_and_booleans_are_compared_exactly():
    ints = torch.arange(3000, device=DEVICE)
    other = ints.clone()
    other[[7, 2999]] += 1
    flags = torch.tensor([True, False, True], device=DEVICE)
    counts = gpu_verdict.count_bad(
        [(ints, other, 0.0, 0.0, False), (ints, ints.clone(), 0.0, 0.0, False), (flags, ~flags, 0.0, 0.0, False)]
    )
    assert counts.tolist() == [2, 0, 3]


def test_more_pairs_than_one_launch_takes_are_each_counted_in_their_own_slot():
    pairs = []
    for k in range(2 * gpu_verdict.GROUP + 1):  # three launches; pair 2 is empty, pair k has k bad elements
        g = torch.zeros(0 if k == 2 else 100 + 700 * k, device=DEVICE)
        e = g.clone()
        e[: k if k != 2 else 0] = 1.0
        pairs.append((g, e, 1e-5, 1e-5, k % 2 == 1))
    assert gpu_verdict.count_bad(pairs).tolist() == [0, 1, 0] + list(range(3, 2 * gpu_verdict.GROUP + 1))


@pytest.mark.parametrize("n", range(1, gpu_verdict.GROUP + 1))
def test_a_launch_of_any_number_of_pairs_up_to_a_group_counts_each_in_its_own_slot(n):
    pairs = []
    for k in range(n):  # pair k has k + 1 elements not close, at its far end
        g = torch.zeros(2000 + 500 * k, device=DEVICE)
        e = g.clone()
        e[-(k + 1) :] = 1.0
        pairs.append((g, e, 1e-5, 1e-5, False))
    assert gpu_verdict.count_bad(pairs).tolist() == list(range(1, n + 1))


def test_every_block_of_a_long_pair_is_counted():
    g = torch.zeros(5 * 1024 + 3, device=DEVICE)
    e = g.clone()
    e[[0, 1024, 4096, 5 * 1024 + 2]] = 1.0
    assert gpu_verdict.count_bad([(g, e, 1e-5, 1e-5, False)]).tolist() == [4]


@pytest.mark.cuda  # the per-step verdict uses the kernel on CUDA only
def test_verdicts_on_a_gpu_agree_with_the_pair_by_pair_comparison():
    g = torch.randn(64, 8, device="cuda")
    near = g + 1e-7
    far = g.clone()
    far[3, 1] = float("nan")
    items = [
        (g, near, *tolerances(g.dtype), None),
        (g, far, *tolerances(g.dtype), None),
        (g, g.clone(), *tolerances(g.dtype), torch.tensor([0, 2], device="cuda")),
    ]
    assert verdicts(items) == [True, False, True]
    assert verdicts(items, bitwise=True) == [False, False, True]


def test_a_pair_that_is_not_contiguous_is_counted_element_for_element():
    g = torch.zeros(48, 40, device=DEVICE).t()  # a transposed view: strided memory
    e = torch.zeros(40, 48, device=DEVICE)
    e[3, 5] = e[39, 47] = 1.0
    assert not g.is_contiguous()
    assert gpu_verdict.count_bad([(g, e, 1e-5, 1e-5, False)]).tolist() == [2]


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "torch.equal"])
def test_byte_views_that_differ_in_any_byte_or_in_length_are_told_apart(kernel, monkeypatch):
    from graphsafe.capture.ledger import differ
    from graphsafe.capture.statewalk import byte_view

    if DEVICE == "cpu" and kernel:  # the kernel in the interpreter, as a GPU runs it compiled
        monkeypatch.setattr(gpu_verdict, "usable", lambda a, b: True)
    a = torch.arange(3000, dtype=torch.float32, device=DEVICE)
    b = a.clone()
    b[2999] = float("nan")  # the last byte block of a pair longer than one program's block
    nan = torch.full((5,), float("nan"), device=DEVICE)
    held = {0: a, 1: a, 2: nan, 3: a}
    ref = {0: byte_view(a.clone()), 1: byte_view(b), 2: byte_view(nan.clone()), 3: byte_view(a[:10].clone())}
    assert differ(held, ref) == {1, 3}

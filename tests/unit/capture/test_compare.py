"""Graph-versus-eager comparison: tolerances, NaN, shapes, and the batched per-step form."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsafe.capture import compare as compare_module
from graphsafe.capture.compare import compare, compare_many


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_equal_tensors_give_no_mismatch():
    x = torch.randn(4, 3)
    assert compare("x", x, x.clone()) is None


def test_nan_in_both_is_equal_but_nan_in_one_is_a_mismatch():
    a = torch.tensor([1.0, float("nan")])
    assert compare("x", a, a.clone()) is None
    m = compare("x", a, torch.tensor([1.0, 2.0]))
    assert m is not None and m.count == 1 and m.first[0]["index"] == [1]


def test_a_shape_difference_is_a_mismatch_of_every_element():
    m = compare("x", torch.zeros(2, 3), torch.zeros(3, 3))
    assert m is not None and m.count == 9 and "shape (2, 3) (graph) vs (3, 3) (eager)" in m.first[0]["note"]


def test_a_one_ulp_difference_passes_the_tolerance_but_not_bitwise():
    g = torch.tensor([1.0, -2.5])
    e = torch.nextafter(g, torch.tensor([2.0, 2.0]))
    assert compare("x", g, e) is None and compare_many([("x", g, e, None)]) == []
    assert compare("x", g, e, bitwise=True).count == 2
    assert [m.count for m in compare_many([("x", g, e, None)], bitwise=True)] == [2]


def test_compare_many_reports_only_the_differing_pairs_in_pair_order():
    a, b = torch.ones(3), torch.zeros(2, 2)
    pairs = [
        ("p0", a, a.clone(), None),
        ("p1", b, b + 1, None),
        ("p2", a, torch.ones(4), None),  # shape
        ("p3", b, b.clone(), None),
    ]
    assert [m.tensor for m in compare_many(pairs)] == ["p1", "p2"]


def test_compare_many_passes_the_locator_to_the_detail():
    rows = torch.zeros(3, 2)
    other = rows.clone()
    other[2, 1] = 5.0
    (m,) = compare_many([("out", rows, other, lambda row: {"request": row * 10})])
    assert m.first[0]["index"] == [2, 1] and m.first[0]["request"] == 20


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.lists(st.sampled_from([0.0, 1.0, -2.5, float("nan")]), min_size=1, max_size=4), min_size=1, max_size=4
    ),
    flips=st.lists(st.booleans(), min_size=4, max_size=4),
    bitwise=st.booleans(),
)
def test_compare_many_agrees_with_compare_pair_by_pair(values, flips, bitwise):
    pairs = []
    for i, v in enumerate(values):
        g = torch.tensor(v)
        e = g.clone()
        if flips[i]:  # one ulp: within tolerance, not bitwise equal (NaN stays NaN)
            e[0] = torch.nextafter(e[0], torch.tensor(10.0))
        pairs.append((f"t{i}", g, e, None))
    expected = [m for (n, g, e, loc) in pairs if (m := compare(n, g, e, bitwise=bitwise)) is not None]
    got = compare_many(pairs, bitwise=bitwise)
    assert [(m.tensor, m.count) for m in got] == [(m.tensor, m.count) for m in expected]


_VALUES = [0.0, -0.0, 1.0, -2.5, 1e-6, float("nan"), float("inf"), float("-inf")]


@settings(max_examples=80, deadline=None)
@given(
    data=st.lists(
        st.tuples(
            st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.bool]),
            st.lists(st.tuples(st.sampled_from(_VALUES), st.sampled_from(_VALUES + ["ulp"])), min_size=1, max_size=5),
        ),
        min_size=1,
        max_size=5,
    ),
    bitwise=st.booleans(),
)
def test_pairs_joined_into_one_comparison_get_the_verdicts_of_pairs_compared_alone(monkeypatch_module, data, bitwise):
    # what a GPU does with a step's small pairs, run on the CPU: the same verdict for every pair
    pairs = []
    for i, (dtype, values) in enumerate(data):
        g = torch.tensor([v for v, _ in values]).to(dtype)
        e = torch.tensor([v if w == "ulp" else w for v, w in values])
        ulp = torch.tensor([w == "ulp" for _, w in values])
        e = torch.where(ulp, torch.nextafter(e, torch.tensor(10.0)), e).to(dtype)
        pairs.append((f"t{i}", g, e, None))
    alone = [m.tensor for m in compare_many(pairs, bitwise=bitwise)]
    monkeypatch_module.setattr(compare_module, "FUSE_ON_CPU", True)
    joined = [m.tensor for m in compare_many(pairs, bitwise=bitwise)]
    monkeypatch_module.setattr(compare_module, "FUSE_ON_CPU", False)
    assert joined == alone
    assert alone == [n for (n, g, e, _) in pairs if compare(n, g, e, bitwise=bitwise) is not None]


# -- identical: the cheap first question before a bitwise comparison --------------------------------


def test_identical_says_true_only_when_a_bitwise_comparison_finds_nothing():
    a = [torch.tensor([1.0, -0.0, 3.0]), torch.arange(4)]
    assert compare_module.identical(a, [t.clone() for t in a])
    assert compare_module.identical(
        [torch.tensor([0.0])], [torch.tensor([-0.0])]
    )  # equal values, as the bitwise test has it
    assert not compare_module.compare_many([("x", torch.tensor([0.0]), torch.tensor([-0.0]), None)], bitwise=True)


@pytest.mark.parametrize(
    "other",
    [
        [torch.tensor([1.0, 2.0, 4.0])],  # a value differs
        [torch.tensor([1.0, 2.0])],  # a shape differs
        [torch.tensor([1, 2, 3])],  # a dtype differs
        [torch.tensor([1.0, 2.0, 3.0])] * 2,  # a tensor more
    ],
    ids=["value", "shape", "dtype", "count"],
)
def test_identical_says_false_for_any_difference(other):
    assert not compare_module.identical([torch.tensor([1.0, 2.0, 3.0])], other)


def test_identical_leaves_nan_to_the_full_comparison():
    nan = torch.tensor([float("nan"), 1.0])
    assert not compare_module.identical([nan], [nan.clone()])
    assert not compare_module.compare_many([("x", nan, nan.clone(), None)], bitwise=True)  # which finds them equal

"""Graph-versus-eager comparison: tolerances, NaN, shapes, and the batched per-step form."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsafe.capture.compare import compare, compare_many


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
    values=st.lists(st.lists(st.sampled_from([0.0, 1.0, -2.5, float("nan")]), min_size=1, max_size=4),
                    min_size=1, max_size=4),
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

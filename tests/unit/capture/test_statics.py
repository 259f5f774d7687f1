"""Large static state without full copies: comparison in pieces and by region, saving only what a
replay can change."""

import types

import pytest
import torch

from graphsafe import Batch, CaptureSpec
from graphsafe.capture import compare as compare_mod
from graphsafe.capture import statics as statics_mod
from graphsafe.capture.compare import Comparator, compare
from graphsafe.capture.statics import SavedStatics, randomise_static, static_dict
from graphsafe.errors import ContractError
from graphsafe.values import SEEDED_POOL, derive_seed, fill_seeded

SPEC = CaptureSpec(max_reqs=2, max_query_len=1, max_seq_len=8, block_size=4, num_blocks=64)
BATCH = Batch((1, 1), (5, 3), ((3, 4), (7,)), seed=1)


class Holder:
    def __init__(self, **tensors):
        self.__dict__.update(tensors)

    def static(self):
        return dict(self.__dict__)


def test_a_comparison_in_pieces_finds_what_a_whole_one_finds(monkeypatch):
    g = torch.randn(64, 4, 8)
    e = g.clone()
    e[3, 1, 2] += 1.0
    e[40] = float("nan")
    e[63, 3, 7] = 5.0
    whole = compare("kv", g, e)
    monkeypatch.setattr(compare_mod, "piece_elems", lambda t: 50)  # 41 pieces, rows split across them
    pieces = compare("kv", g, e)
    assert repr(pieces) == repr(whole)  # (NaN != NaN: compared as text)
    rows = compare("kv", g, e, rows=torch.tensor([3, 40]))
    assert (rows.count, rows.total) == (1 + 32, 64) and rows.first[0]["index"] == [3, 1, 2]


def test_a_step_compares_only_the_region_and_the_example_end_everything():
    cmp = Comparator(SPEC, whole_below=0)
    g = torch.randn(SPEC.num_blocks, 4, 2)
    e = g.clone()
    e[50] += 1.0  # a block no batch of the example uses
    statics_g, statics_e = {"kv": g}, {"kv": e}
    region = cmp.region(statics_g, [BATCH])
    assert region.tolist() == [0, 3, 4, 7]
    assert cmp.step([], [], statics_g, statics_e, BATCH, region) == []
    (m,) = cmp.statics(statics_g, statics_e, BATCH)
    assert m.tensor == "static['kv']" and m.count == 8 and m.first[0]["block"] == 50 and m.first[0]["request"] == -1
    e[4, 0, 0] += 1.0  # inside: seen at the step
    assert [m.first[0]["block"] for m in cmp.step([], [], statics_g, statics_e, BATCH, region)] == [4]
    # small caches are compared whole at every step, as before
    assert Comparator(SPEC).region(statics_g, [BATCH]) is None


@pytest.mark.parametrize("one_read", [False, True], ids=["piece_by_piece", "one_read_as_on_a_gpu"])
def test_saved_statics_restore_rows_seeded_pieces_and_clones(monkeypatch, one_read):
    monkeypatch.setattr(statics_mod, "ONE_READ_ON_CPU", one_read)
    seed = 5
    cache = torch.randn(SPEC.num_blocks, 4, 2)
    weights = fill_seeded(torch.empty(SEEDED_POOL * 2 + 3), derive_seed(seed, "weights"))
    weights[10] = float("nan")  # as prepare() might have written: kept in a saved piece
    counts = torch.arange(6)
    statics = {"cache": cache, "weights": weights, "counts": counts}
    before = {k: v.clone() for k, v in statics.items()}
    cmp = Comparator(SPEC, whole_below=0)
    saved = SavedStatics(statics, seed, cmp.region(statics, [BATCH]), cmp.paged)
    kinds = {part[0] for part in saved.parts}
    assert kinds == {"rows", "seeded", "clone"}
    assert list(saved.parts[1][3]) == [0]  # only the changed piece (elements 10 and 12)
    assert sum(v.numel() for v in saved.parts[1][3].values()) < weights.numel()
    for _ in range(2):
        cache[[0, 3, 7]] += 1.0
        weights[-1] = 0.0
        weights[12] = 2.0
        counts += 1
        saved.restore()
        for k, v in statics.items():
            assert torch.equal(v.view(torch.uint8), before[k].view(torch.uint8)), k


@pytest.mark.parametrize("one_read", [False, True], ids=["piece_by_piece", "one_read_as_on_a_gpu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_saved_statics_keep_nothing_of_an_untouched_large_tensor(monkeypatch, dtype, one_read):
    monkeypatch.setattr(statics_mod, "ONE_READ_ON_CPU", one_read)
    t = fill_seeded(torch.empty(SEEDED_POOL * 3, dtype=dtype), derive_seed(1, "w"))
    saved = SavedStatics({"w": t}, 1, None, lambda t: False)
    assert saved.parts[0][0] == "seeded" and saved.parts[0][3] == {}


def test_randomising_like_an_instance_just_randomised_copies_the_same_values():
    def make():
        return Holder(kv=torch.empty(SEEDED_POOL + 5), w=torch.empty(3, dtype=torch.float16), n=torch.arange(3))

    a, b, c = make(), make(), make()
    randomise_static(a, 3)
    randomise_static(b, 3, like=a)
    randomise_static(c, 3)
    for name in ("kv", "w", "n"):
        assert torch.equal(getattr(b, name), getattr(c, name)) and torch.equal(getattr(a, name), getattr(c, name))
    assert torch.equal(c.kv, fill_seeded(torch.empty(SEEDED_POOL + 5), derive_seed(3, "kv")))


class _Holder:
    def __init__(self):
        self.cache = torch.zeros(4, 8)
        self.nested = {"state": torch.ones(3)}
        self.inner = types.SimpleNamespace(weights=torch.ones(2, 2))

    def static(self):
        return {"cache": self.cache[1:], "state": self.nested["state"], "weights": self.inner.weights}


def test_static_tensors_held_as_attributes_items_or_deeper_are_accepted():
    target = _Holder()
    assert set(static_dict(target)) == {"cache", "state", "weights"}


def test_a_static_tensor_built_by_static_itself_is_refused_even_beside_held_ones():
    target = _Holder()
    target.static = lambda: {"cache": target.cache, "fresh": torch.zeros(2)}
    with pytest.raises(ContractError, match=r"static\(\)\['fresh'\] is not held by the target"):
        static_dict(target)

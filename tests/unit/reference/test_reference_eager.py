"""Specifications for the reference targets in ``graphsafe.reference``, run eagerly (no graphs).

On a machine without a GPU the kernels run under the Triton interpreter.  Four groups:

* eager correctness: every variant's ``prepare`` + ``forward`` on a fresh instance matches
  plain PyTorch softmax attention over the paged cache (written once, below, independent
  of the kernels), including writes into the KV cache;
* padding: a fixed variant serves a padded batch exactly like the unpadded one;
* registry: names, classes and entry points;
* bug mechanisms: each buggy variant really does the unsafe thing its story describes,
  shown at the target level without the checker, and its fixed twin does not.
"""

from __future__ import annotations

import gc
import importlib.metadata
import math
import weakref

import pytest
import torch

import graphsafe
from graphsafe import Batch, CaptureSpec, Support, derive_seed, seeded
from graphsafe.contract import emulated_capture
from graphsafe.engines.triton_env import interpreter_active
from graphsafe.reference import BUGGY, FIXED, REGISTRY, names, resolve
from graphsafe.reference.flex import document_ids

ALL_NAMES = [
    "triton_mla",
    "triton_mla:capture_max_seq_len",
    "triton_mla:nan_padding",
    "mla_indexer",
    "mla_indexer:no_tail_zero",
    "mla_indexer:frozen_uniform_branch",
    "flex",
    "flex:fresh_metadata",
    "flex:batch_sized_buffers",
    "flashmla_lazy",
    "flashmla_lazy:shared_state",
    "flashmla_fp8",
    "flashmla_fp8:fresh_buffers",
]
EXPECTED = {
    "triton_mla:capture_max_seq_len": "frozen-host-value",
    "triton_mla:nan_padding": "stale-padding",
    "mla_indexer:no_tail_zero": "stale-padding",
    "mla_indexer:frozen_uniform_branch": "frozen-host-value",
    "flex:fresh_metadata": "unpersisted-metadata",
    "flex:batch_sized_buffers": "stale-pointer",
    "flashmla_lazy:shared_state": "lazy-init",
    "flashmla_fp8:fresh_buffers": "stale-pointer",
}
SUPPORT = {
    "triton_mla": Support.UNIFORM_BATCH,
    "mla_indexer": Support.ALWAYS,
    "flex": Support.ALWAYS,
    "flashmla_lazy": Support.UNIFORM_SINGLE_TOKEN_DECODE,
    "flashmla_fp8": Support.UNIFORM_SINGLE_TOKEN_DECODE,
}


def backend(name: str) -> str:
    return name.split(":")[0]


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def make_batch(spec: CaptureSpec, query_lens, seq_lens, *, seed: int = 1) -> Batch:
    """A batch whose blocks are scattered over the cache (never block 0, the null block)."""
    order = (torch.randperm(spec.num_blocks - 1, generator=torch.Generator().manual_seed(seed)) + 1).tolist()
    table = []
    for s in seq_lens:
        n = math.ceil(s / spec.block_size)
        table.append(tuple(order[:n]))
        order = order[n:]
    return Batch(tuple(query_lens), tuple(seq_lens), tuple(table), seed=seed)


# (query_lens, seq_lens) per support level; each list has multi-block sequences,
# seq len 1 where the query length allows it, and the spec's max_seq_len (64).
BATCHES = {
    Support.UNIFORM_BATCH: [
        ((2, 2, 2, 2), (2, 17, 64, 33)),
        ((1, 1, 1), (1, 16, 64)),
        ((2,), (40,)),
    ],
    Support.ALWAYS: [
        ((1, 2, 2, 1), (1, 33, 64, 16)),
        ((2, 2), (2, 47)),
        ((2, 1, 2), (64, 5, 18)),
        ((1,), (64,)),
    ],
    Support.UNIFORM_SINGLE_TOKEN_DECODE: [
        ((1, 1, 1, 1), (1, 17, 64, 40)),
        ((1,), (33,)),
        ((1, 1), (64, 2)),
    ],
}


def batches_for(name: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return BATCHES[resolve(name).support]


# Kernels compiled for a GPU read GPU tensors only; under the interpreter everything is on the CPU.
DEVICE = "cuda" if torch.cuda.is_available() and not interpreter_active() else "cpu"


def randomise_static(g, seed: int = 0) -> None:
    for key, t in g.static().items():
        t.copy_(seeded(t.shape, seed=derive_seed(seed, key), dtype=t.dtype, device=t.device))


def new_instance(name: str, seed: int = 0):
    cls = resolve(name)
    g = cls()
    g.setup(cls.default_spec, DEVICE)
    randomise_static(g, seed)
    return g


def as_tuple(out) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def run(g, batch: Batch) -> tuple[torch.Tensor, ...]:
    g.prepare(batch)
    return tuple(o.clone().cpu() for o in g.live(as_tuple(g.forward()), batch))


def poison(g) -> None:
    """What the checker does before every prepare: NaN into every non-static float tensor."""
    static = {t.untyped_storage().data_ptr() for t in g.static().values()}
    seen, stack = set(), [g]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            if obj.dtype.is_floating_point and obj.untyped_storage().data_ptr() not in static:
                obj.fill_(float("nan"))
            continue
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("graphsafe"):
            stack.extend(vars(obj).values())


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual.cpu(), expected.cpu(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------
# reference math: plain PyTorch, one token at a time
# ---------------------------------------------------------------------------------------
def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [H, D], k/v [n, H, D] -> [H, D]."""
    scores = torch.einsum("hd,nhd->hn", q.double(), k.double()) / math.sqrt(q.shape[-1])
    return torch.einsum("hn,nhd->hd", scores.softmax(-1), v.double()).float()


def cached_rows(cache: torch.Tensor, batch: Batch, r: int, positions) -> torch.Tensor:
    """Cache entries of request r at the given sequence positions (through its block table)."""
    bs = cache.shape[1]
    return torch.stack([cache[batch.block_table[r][p // bs], p % bs] for p in positions])


def live_tokens(batch: Batch):
    """(row, request, absolute position) of every live token, packed by cu_query_lens."""
    row = 0
    for r, (q, s) in enumerate(zip(batch.query_lens, batch.seq_lens)):
        for j in range(q):
            yield row, r, s - q + j
            row += 1


def queries(batch: Batch, heads: int, dim: int) -> torch.Tensor:
    return seeded((batch.num_tokens, heads, dim), seed=derive_seed(batch.seed, "q"))


def latent_attention_ref(cache: torch.Tensor, batch: Batch, q: torch.Tensor) -> torch.Tensor:
    """MLA: one latent head shared by all query heads, key = value = the latent row."""
    out = torch.empty_like(q)
    for row, r, p in live_tokens(batch):
        kv = cached_rows(cache, batch, r, range(p + 1))[:, None, :].expand(-1, q.shape[1], -1)
        out[row] = softmax_attention(q[row], kv, kv)
    return out


def reference(name: str, g, batch: Batch):
    """Expected (live outputs, static tensors after forward) for ``g`` (already set up and randomised)."""
    static = {k: t.clone().cpu() for k, t in g.static().items()}
    b = backend(name)
    if b == "flex":
        q = queries(batch, g.HEADS, g.DIM)
        out = torch.empty_like(q)
        for row, r, p in live_tokens(batch):
            docs = document_ids(batch.seq_lens[r], derive_seed(batch.seed, "docs", r))
            keys = [k for k in range(p + 1) if docs[k] == docs[p]]
            k = cached_rows(static["k_cache"], batch, r, keys)
            v = cached_rows(static["v_cache"], batch, r, keys)
            out[row] = softmax_attention(q[row], k, v)
        return (out,), static
    q = queries(batch, g.HEADS, g.LATENT)
    cache = static["kv_cache"]
    if b == "flashmla_fp8":
        cache = cache.float() * g.kv_scale
    if b == "mla_indexer":
        # forward first writes every live token's new latent key at its own position
        k_new = seeded((batch.num_tokens, g.LATENT), seed=derive_seed(batch.seed, "k_new"))
        bs = cache.shape[1]
        for row, r, p in live_tokens(batch):
            cache[batch.block_table[r][p // bs], p % bs] = k_new[row]
    out = latent_attention_ref(cache, batch, q)
    if b == "triton_mla":
        scale = out.abs().amax().clamp(min=1e-6).reshape(1)
        return (out / scale, scale), static
    return (out,), static


def token_padding_rows(name: str, batch: Batch) -> bool:
    """True when some of forward's token rows are padding (num_tokens < num_slots * max_query_len)."""
    return batch.num_tokens < batch.num_slots * resolve(name).default_spec.max_query_len


# ---------------------------------------------------------------------------------------
# eager correctness
# ---------------------------------------------------------------------------------------
EAGER_CASES = [
    pytest.param(name, i, id=f"{name}-batch{i}")
    for name in ALL_NAMES
    for i in range(len(BATCHES[SUPPORT[backend(name)]]))
]


@pytest.mark.parametrize("name,index", EAGER_CASES)
def test_eager_forward_matches_softmax_attention_over_the_cache(name, index):
    cls = resolve(name)
    query_lens, seq_lens = batches_for(name)[index]
    batch = make_batch(cls.default_spec, query_lens, seq_lens, seed=10 + index)
    if name == "triton_mla:nan_padding" and token_padding_rows(name, batch):
        pytest.skip("nan_padding's bug shows eagerly as soon as a token row is padding (see its test below)")
    g = new_instance(name, seed=index)
    expected_out, expected_static = reference(name, g, batch)
    out = run(g, batch)
    assert len(out) == len(expected_out)
    for a, e in zip(out, expected_out):
        close(a, e)
    for key, t in g.static().items():
        close(t.float(), expected_static[key].float())


@pytest.mark.parametrize("name", ALL_NAMES)
def test_every_variant_supports_its_backends_level_and_has_a_small_default_spec(name):
    cls = resolve(name)
    spec = cls.default_spec
    assert cls.support is SUPPORT[backend(name)]
    assert spec.max_reqs == 4 and spec.block_size == 16 and 64 <= spec.max_seq_len <= 128
    assert spec.max_query_len == (1 if cls.support is Support.UNIFORM_SINGLE_TOKEN_DECODE else 2)


def test_fp8_backend_keeps_its_cache_in_float8_e4m3():
    g = new_instance("flashmla_fp8")
    assert g.static()["kv_cache"].dtype == torch.float8_e4m3fn


# ---------------------------------------------------------------------------------------
# padding: fixed variants serve padded batches like unpadded ones
# ---------------------------------------------------------------------------------------
def padding_case(name: str) -> Batch:
    spec = resolve(name).default_spec
    query_lens, seq_lens = batches_for(name)[1]  # fewer requests than max_reqs
    return make_batch(spec, query_lens, seq_lens, seed=5)


@pytest.mark.parametrize("name", FIXED)
def test_padded_batch_on_fresh_fixed_instance_gives_the_unpadded_live_rows(name):
    batch = padding_case(name)
    spec = resolve(name).default_spec
    eager = new_instance(name)
    expected = run(eager, batch)
    g = new_instance(name)
    poison(g)
    out = run(g, batch.padded(spec.max_reqs))
    for a, e in zip(out, expected):
        assert torch.isfinite(a).all()
        close(a, e)
    for key, t in g.static().items():
        close(t.float(), eager.static()[key].float())


@pytest.mark.parametrize("name", FIXED)
def test_padded_batch_after_a_larger_one_gives_the_unpadded_live_rows(name):
    batch = padding_case(name)
    spec = resolve(name).default_spec
    eager = new_instance(name)
    expected = run(eager, batch)
    g = new_instance(name)
    run(g, spec.worst_case_batch(spec.max_reqs, seed=3))
    randomise_static(g)  # both instances start the step from the same cache
    poison(g)
    out = run(g, batch.padded(spec.max_reqs))
    for a, e in zip(out, expected):
        assert torch.isfinite(a).all()
        close(a, e)
    for key, t in g.static().items():
        close(t.float(), eager.static()[key].float())


# ---------------------------------------------------------------------------------------
# registry and entry points
# ---------------------------------------------------------------------------------------
def test_registry_lists_the_thirteen_targets_fixed_first_per_backend():
    assert names() == ALL_NAMES
    assert list(REGISTRY) == ALL_NAMES
    assert FIXED == [n for n in ALL_NAMES if ":" not in n]
    assert BUGGY == [n for n in ALL_NAMES if ":" in n]


@pytest.mark.parametrize("name", ALL_NAMES)
def test_resolve_returns_the_class_registered_under_that_name(name):
    cls = resolve(name)
    assert cls is REGISTRY[name]
    assert issubclass(cls, graphsafe.Target)
    assert cls.name == name
    assert cls.expected == EXPECTED.get(name)


@pytest.mark.parametrize("name", BUGGY)
def test_each_buggy_variant_subclasses_its_fixed_twin(name):
    assert issubclass(resolve(name), resolve(backend(name)))


@pytest.mark.parametrize("name", ALL_NAMES)
def test_entry_point_loads_the_same_class(name):
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group="graphsafe.targets")}
    assert name in eps
    assert eps[name].load() is resolve(name)


@pytest.mark.parametrize("bad", ["triton", "flex:nope", "", "FLEX"])
def test_unknown_name_raises_value_error_listing_known_names(bad):
    with pytest.raises(ValueError) as info:
        resolve(bad)
    message = str(info.value)
    assert repr(bad) in message
    for name in ALL_NAMES:
        assert name in message


# ---------------------------------------------------------------------------------------
# bug mechanisms, shown without the checker
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,varies", [("triton_mla", False), ("triton_mla:capture_max_seq_len", True)])
def test_split_count_follows_the_batch_only_in_capture_max_seq_len(name, varies):
    spec = resolve(name).default_spec
    g = new_instance(name)
    g.prepare(make_batch(spec, (2, 2), (20, 9)))
    short = (g.num_kv_splits, g.split_len)
    g.prepare(make_batch(spec, (2, 2), (64, 9)))
    long = (g.num_kv_splits, g.split_len)
    assert (short != long) is varies
    assert long[0] * long[1] >= spec.max_seq_len


@pytest.mark.parametrize("name,wrong", [("triton_mla", False), ("triton_mla:capture_max_seq_len", True)])
def test_split_plan_frozen_from_a_short_batch_misses_keys_of_a_longer_one(name, wrong):
    spec = resolve(name).default_spec
    long = make_batch(spec, (2, 2), (64, 50), seed=2)
    g = new_instance(name)
    expected, _ = reference(name, g, long)
    g.prepare(make_batch(spec, (2, 2), (20, 9)))
    frozen = (g.num_kv_splits, g.split_len)  # what a graph captured on this batch keeps
    g.prepare(long)
    g.num_kv_splits, g.split_len = frozen
    out = g.live(g.forward(), long)
    assert (not torch.allclose(out[0].cpu(), expected[0], rtol=1e-4, atol=1e-4)) is wrong


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("name,nan", [("triton_mla", False), ("triton_mla:nan_padding", True)])
def test_padded_rows_turn_every_live_row_nan_only_in_nan_padding(name, nan):
    spec = resolve(name).default_spec
    batch = make_batch(spec, (2, 2), (30, 64))
    g = new_instance(name)
    g.prepare(batch.padded(spec.max_reqs))
    assert bool(g.forward()[0].isnan().all()) == nan
    live_out, scale = run(g, batch.padded(spec.max_reqs))
    assert bool(live_out.isnan().all()) == nan
    assert bool(scale.isnan().all()) == nan


@pytest.mark.parametrize("name,stale", [("mla_indexer", False), ("mla_indexer:no_tail_zero", True)])
def test_padded_slots_keep_the_previous_batchs_lengths_only_without_tail_zeroing(name, stale):
    spec = resolve(name).default_spec
    g = new_instance(name)
    g.prepare(spec.worst_case_batch(spec.max_reqs, seed=3))
    small = make_batch(spec, (1, 2), (10, 40)).padded(spec.max_reqs)
    g.prepare(small)
    tail = g.seq_lens[small.num_reqs :]
    assert bool((tail == spec.max_seq_len).all()) == stale
    assert bool((tail == 0).all()) != stale
    assert bool((g.block_table[small.num_reqs :] != 0).any()) == stale


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name,stale", [("mla_indexer", False), ("mla_indexer:no_tail_zero", True)])
def test_padded_token_rows_write_keys_into_the_cache_only_without_tail_zeroing(name, stale):
    spec = resolve(name).default_spec
    small = make_batch(spec, (1, 2), (10, 40), seed=4)
    eager = new_instance(name)
    run(eager, small)
    g = new_instance(name)
    g.prepare(spec.worst_case_batch(spec.max_reqs, seed=3))
    randomise_static(g)
    poison(g)
    g.prepare(small.padded(spec.max_reqs))
    g.forward()
    live_rows = g.num_token_rows
    assert bool((g.tok_len[small.num_tokens : live_rows] > 0).any()) == stale
    assert (not torch.equal(g.kv_cache, eager.kv_cache)) is stale


@pytest.mark.parametrize("name,branch", [("mla_indexer", False), ("mla_indexer:frozen_uniform_branch", True)])
def test_uniform_branch_is_a_host_value_recorded_by_prepare(name, branch):
    spec = resolve(name).default_spec
    g = new_instance(name)
    g.prepare(make_batch(spec, (2, 2), (8, 9)))
    assert getattr(g, "uniform", None) is (True if branch else None)
    g.prepare(make_batch(spec, (1, 2), (8, 9)))
    assert getattr(g, "uniform", None) is (False if branch else None)


@pytest.mark.parametrize("name,wrong", [("mla_indexer", False), ("mla_indexer:frozen_uniform_branch", True)])
def test_uniform_path_frozen_from_the_capture_batch_expands_a_mixed_batch_wrongly(name, wrong):
    spec = resolve(name).default_spec
    mixed = make_batch(spec, (1, 2, 2), (20, 33, 5), seed=6)
    g = new_instance(name)
    g.prepare(spec.worst_case_batch(spec.max_reqs))
    frozen = {k: getattr(g, k) for k in ("uniform", "decode_len") if hasattr(g, k)}  # kept by a graph
    g.prepare(mixed)
    g.__dict__.update(frozen)
    g.forward()
    expected_lens = torch.tensor([p + 1 for _, _, p in live_tokens(mixed)], dtype=torch.int32)
    assert (not torch.equal(g.tok_len[: mixed.num_tokens].cpu(), expected_lens)) is wrong


@pytest.mark.parametrize("name,rebinds", [("flex", False), ("flex:fresh_metadata", True)])
def test_metadata_seen_at_capture_is_updated_in_place_only_in_the_fixed_flex(name, rebinds):
    spec = resolve(name).default_spec
    g = new_instance(name)
    g.prepare(spec.worst_case_batch(spec.max_reqs))
    with emulated_capture():
        g.forward()
    captured = g.captured_meta[spec.max_reqs]
    ptr = captured.kv_num_blocks.data_ptr()
    small = make_batch(spec, (1, 2), (10, 40)).padded(spec.max_reqs)
    g.prepare(small)
    assert (g.meta.kv_num_blocks.data_ptr() != ptr) is rebinds
    # the tensors the graph reads: does this step's metadata reach them?
    assert bool((captured.kv_num_blocks[small.num_tokens :] == 0).all()) != rebinds


@pytest.mark.parametrize("name,reallocates", [("flex", False), ("flex:batch_sized_buffers", True)])
def test_persistent_buffers_are_reallocated_for_a_longer_batch_only_when_batch_sized(name, reallocates):
    spec = resolve(name).default_spec
    g = new_instance(name)
    g.prepare(make_batch(spec, (1, 2), (10, 12)).padded(2))
    first = {k: weakref.ref(t) for k, t in g.meta.tensors().items()}
    ptrs = {k: t.data_ptr() for k, t in g.meta.tensors().items()}
    g.prepare(make_batch(spec, (2, 1), (40, 64)).padded(2))
    gc.collect()
    assert all((ref() is None) is reallocates for ref in first.values())
    assert all((g.meta.tensors()[k].data_ptr() != p) is reallocates for k, p in ptrs.items())


@pytest.mark.parametrize("name,runs", [("flashmla_lazy", 2), ("flashmla_lazy:shared_state", 1)])
def test_capture_after_warm_up_runs_the_planner_only_with_separate_states(name, runs):
    spec = resolve(name).default_spec
    g = new_instance(name)
    g.prepare(spec.worst_case_batch(spec.max_reqs))
    g.forward()  # warm-up
    with emulated_capture():
        g.forward()  # capture
    assert g.planner_runs == runs


@pytest.mark.parametrize("name,wrong", [("flashmla_lazy", False), ("flashmla_lazy:shared_state", True)])
def test_replaying_the_captured_forward_on_a_later_batch_uses_a_stale_plan_only_with_a_shared_state(name, wrong):
    spec = resolve(name).default_spec
    g = new_instance(name)
    g.prepare(spec.worst_case_batch(spec.max_reqs))
    g.forward()  # warm-up
    with emulated_capture():
        state = g.current_state()
        planned_at_capture = not state.have_initialized
        g.forward()  # capture
    short = make_batch(spec, (1, 1, 1, 1), (3, 20, 7, 1), seed=8)
    expected, _ = reference(name, g, short)
    g.prepare(short)
    state.have_initialized = not planned_at_capture  # a replay repeats the capture's branch
    with emulated_capture():
        out = g.live(as_tuple(g.forward()), short)
    assert (not torch.allclose(out[0].cpu(), expected[0], rtol=1e-4, atol=1e-4)) is wrong


@pytest.mark.parametrize("name,rebinds", [("flashmla_fp8", False), ("flashmla_fp8:fresh_buffers", True)])
def test_scheduler_metadata_is_a_new_tensor_every_step_only_with_fresh_buffers(name, rebinds):
    spec = resolve(name).default_spec
    g = new_instance(name)
    g.prepare(make_batch(spec, (1, 1), (64, 2)))
    old = weakref.ref(g.tile_scheduler_metadata)
    old_splits = weakref.ref(g.num_splits)
    g.prepare(make_batch(spec, (1, 1), (5, 40)))
    gc.collect()
    assert (g.tile_scheduler_metadata is not g.cg_buf_tile_scheduler_metadata) is rebinds
    assert (g.num_splits is not g.cg_buf_num_splits) is rebinds
    assert (old() is None) is rebinds and (old_splits() is None) is rebinds
    # whichever tensors forward reads hold this step's metadata
    assert g.num_splits[:2].tolist() == [1, 2]

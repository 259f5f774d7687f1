"""The write ledger's per-parity record of prepare's writes, and how regions of an allocation are named."""

from __future__ import annotations

import torch

from graphsafe.capture.ledger import prepare_calls
from graphsafe.capture.regions import byte_region, region_name, written_args
from graphsafe.capture.statewalk import byte_view, storage_key
from graphsafe.engines.recording import Launch, TensorArg

VALUES = torch.tensor([3, 1, 0, 2], dtype=torch.int32)


def keyed(*tensors: torch.Tensor) -> dict[int, torch.Tensor]:
    return {storage_key(t): t for t in tensors}


class DoubleBuffer:
    """Writes the step's values into two copies in turn (the next copy on every call)."""

    def __init__(self):
        self.copies = [torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)]
        self.cur = 0

    def prepare(self) -> None:
        self.cur = 1 - self.cur
        self.copies[self.cur].copy_(VALUES)


def test_a_buffer_written_on_alternate_calls_belongs_to_one_parity_only():
    db = DoubleBuffer()
    db.prepare()  # the failing step's own call: it wrote copies[1]
    ka, kb = storage_key(db.copies[0]), storage_key(db.copies[1])
    led = prepare_calls(keyed(*db.copies), db.prepare)
    assert kb in led.step.mask and kb not in led.other.mask
    assert ka in led.other.mask and ka not in led.step.mask
    assert led.alternating(ka) and led.alternating(kb)


def test_four_calls_leave_a_double_buffer_and_its_buffers_as_they_were():
    db = DoubleBuffer()
    db.prepare()
    db.copies[0].fill_(9)
    before, cur = [c.clone() for c in db.copies], db.cur
    prepare_calls(keyed(*db.copies), db.prepare)
    assert db.cur == cur
    assert all(torch.equal(a, b) for a, b in zip(db.copies, before))


def test_an_idempotent_prepare_writes_alike_on_both_parities_even_values_equal_to_a_fill():
    buf = torch.zeros(3)
    led = prepare_calls(keyed(buf), lambda: buf.copy_(torch.tensor([1.0, 0.0, 2.0])))
    k = storage_key(buf)
    assert torch.equal(led.step.mask[k], led.other.mask[k]) and not led.alternating(k)
    assert bool(led.step.mask[k].all())  # the 0.0 written over the zero fill shows over the other fill


def test_the_mask_covers_only_the_elements_prepare_writes():
    buf = torch.zeros(4, dtype=torch.int64)
    led = prepare_calls(keyed(buf), lambda: buf[:2].copy_(torch.tensor([5, 0])))
    mask = led.step.mask[storage_key(buf)]
    assert mask[:16].all() and not mask[16:].any()
    assert led.written(storage_key(buf), 0, 16) and not led.written(storage_key(buf), 16, 32)


def test_holds_tells_a_copy_with_this_batchs_values_from_a_stale_one():
    db = DoubleBuffer()
    db.prepare()  # copies[1] holds this batch's values; copies[0] an older batch's
    db.copies[0].fill_(9)
    seen = {storage_key(c): byte_view(c).clone() for c in db.copies}
    led = prepare_calls(keyed(*db.copies), db.prepare)
    ka, kb = storage_key(db.copies[0]), storage_key(db.copies[1])
    assert led.holds(kb, seen[kb])
    assert not led.holds(ka, seen[ka])


def test_a_tensor_argument_spans_the_bytes_of_its_view():
    arg = TensorArg(key=1, dtype="torch.int32", shape=(2, 3), stride=(4, 1), offset=8, internal=False)
    assert byte_region(arg) == (32, 32 + (1 + 4 + 2) * 4)
    assert byte_region(TensorArg(1, "torch.float32", (0, 3), (3, 1), 0, False)) is None


def test_a_region_of_a_packed_buffer_is_named_by_its_index():
    t = torch.zeros(2, 2, 8, dtype=torch.int32)  # 128 bytes
    assert region_name("self.m", t, 0, 128) == "self.m"
    assert region_name("self.m", t, 64, 128) == "self.m[1]"
    assert region_name("self.m", t, 96, 128) == "self.m[1, 1]"
    assert region_name("self.m", t, 8, 16) == "self.m[0, 0, 2:4]"
    assert region_name("self.m", t, 2, 6) == "self.m (bytes 2:6)"  # not whole elements


def test_a_launch_writes_the_arguments_its_schema_or_its_learned_writes_say():
    a, b = (TensorArg(k, "torch.float32", (4,), (1,), 0, False) for k in (1, 2))
    aten = Launch("aten", "aten::copy_", {"self": a, "src": b}, writes=("self",))
    assert written_args(aten, set()) == [a]
    triton = Launch("triton", "k", {"x": a, "y": b, "n": 4})
    assert written_args(triton, {("k", "y")}) == [b]
    assert written_args(triton, set()) == [a, b]  # nothing learned: any tensor argument may be written


def test_the_walk_names_a_dataclasss_fields_and_its_other_attributes_each_once():
    import dataclasses

    from graphsafe.capture.statewalk import walk

    @dataclasses.dataclass
    class Meta:
        a: torch.Tensor
        b: list

    class Target:
        pass

    t = Target()
    shared = torch.zeros(3)
    t.meta = Meta(torch.ones(2), [shared, {"k": torch.arange(4)}])
    t.again = shared  # a tensor under two paths: named under each
    t.extra_on_meta = t.meta  # one object under two paths: walked once
    t.meta.note = torch.full((1,), 7.0)  # an attribute outside the dataclass's fields
    assert [p for p, _ in walk(t)] == [
        "self.meta.a",
        "self.meta.b[0]",
        "self.meta.b[1]['k']",
        "self.meta.note",
        "self.again",
    ]


def _zoo():
    """An object graph with every kind of holder the walk knows, a cycle, a shared object and a skipped module."""
    import dataclasses
    from collections import namedtuple

    @dataclasses.dataclass
    class Meta:
        a: torch.Tensor
        b: list

    @dataclasses.dataclass(slots=True)
    class Slotted:
        x: torch.Tensor
        y: object = None

    class WithSlots:
        __slots__ = ("p", "q")

    class Target:
        pass

    Pair = namedtuple("Pair", "left right")
    t = Target()
    t.meta = Meta(torch.ones(2), [torch.zeros(3), {"k": torch.arange(4)}])
    t.meta.note = torch.full((1,), 7.0)
    t.slotted = Slotted(torch.ones(5), Pair(torch.zeros(1), (None, 3, "s", torch.ones(6))))
    ws = WithSlots()
    ws.p = torch.ones(7)  # q never set
    t.ws = ws
    mod = torch.nn.Linear(2, 2)
    mod.register_buffer("running", torch.zeros(2))
    mod.extra = {"w": mod.weight}  # a parameter under two names
    t.mod = mod
    t.again = t.meta  # one object under two paths
    t.cycle = [t]
    t.hypothesis_thing = __import__("hypothesis").strategies.just(torch.ones(9))  # a skipped module's object
    deep = torch.ones(8)
    for _ in range(12):
        deep = [deep]
    t.deep = deep  # past the depth limit
    return t


def test_the_fast_tensor_walk_finds_what_the_named_walk_finds_in_its_order():
    from graphsafe.capture.statewalk import tensors, walk

    t = _zoo()
    named = [x for _, x in walk(t)]
    assert len(named) == 12  # not the skipped module's, not the one past the depth limit
    fast = tensors(t)
    assert len(fast) == len(named) and all(a is b for a, b in zip(fast, named))


def test_storages_of_keeps_one_tensor_per_storage_and_leaves_out_the_excluded():
    from graphsafe.capture.ledger import storages_of

    t = _zoo()
    held = storages_of(t, exclude={storage_key(t.meta.a)})
    assert storage_key(t.meta.a) not in held
    assert held[storage_key(t.mod.weight)] is t.mod.weight
    assert len(held) == 10  # twelve tensors: the weight's two names are one storage, one storage excluded


def test_the_walk_forgets_the_types_it_classified_past_its_bound(monkeypatch):
    import dataclasses

    from graphsafe.capture import statewalk

    monkeypatch.setattr(statewalk, "_MAX_KINDS", 3)
    statewalk._KINDS.clear()
    made = []
    for i in range(5):  # a class made on the fly each time, as a test's local class is
        made.append(dataclasses.make_dataclass(f"Made{i}", [("x", object)])(torch.full((1,), float(i))))
    found = [statewalk.tensors(m)[0].item() for m in made]
    assert found == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert len(statewalk._KINDS) <= 3


def test_a_prepare_that_clears_a_plan_zeroes_it_and_one_that_writes_ones_does_not():
    plan, lens = torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)

    def prepare():
        plan.zero_()  # a plan invalidated
        lens.fill_(1)  # a batch's last_page_len: all ones, still its values

    led = prepare_calls(keyed(plan, lens), prepare)
    assert led.step.zeroes(storage_key(plan)) and not led.step.zeroes(storage_key(lens))

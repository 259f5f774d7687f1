"""graphsafe.guard on small targets: free, rebind and host-value change caught on the first checked
replay (on every engine), nothing recorded or called in mode off, no strong references, no
allocations on skipped replays, findings raised, logged, handed over and reported."""

from __future__ import annotations

import logging
import pickle
import sys
import tracemalloc
from types import SimpleNamespace

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

import graphsafe
from graphsafe import Batch, FindingKind, GuardError, UsageError
from graphsafe.engines import get_engine
from graphsafe.guard import Guard, core
from graphsafe.reports import load_finding
from tests.targets import synthetic as S

DEV = get_engine("emulate").device  # where Triton kernels run here: CPU (interpreter) or the GPU
SMALL = Batch((1, 2), (3, 9), ((1,), (2, 3, 4)), seed=5)  # max_seq_len 9 < the capture's 16


def captured(cls, engine, sizes=(4,), **guard_kw):
    """A ``cls`` instance, its graphs by size (captured largest first under a guard) and the guard."""
    eng = get_engine(engine)
    t = cls()
    t.setup(S.SPEC, eng.device)
    guard = Guard(t, **guard_kw)
    graphs = {}
    with torch.no_grad():
        for size in sorted(sizes, reverse=True):
            t.prepare(S.SPEC.worst_case_batch(size))
            eng.warmup(t.forward, skip_keys=set())
            with guard.capture(key=size):
                graphs[size] = eng.capture(t.forward, pool=None)
    return t, graphs, guard


def test_a_freed_input_is_a_stale_pointer_on_the_first_replay(engine):
    t, graphs, guard = captured(S.FreshLens, engine)
    t.prepare(SMALL.padded(4))  # rebinds self.lens: the captured tensor loses its last reference
    with pytest.raises(GuardError) as e:
        guard.before_replay(4)
    f = e.value.finding
    assert f.kind == FindingKind.STALE_POINTER and f.where == "self.lens"
    assert "freed after capture" in f.message and "first used at" in f.message and "_scale_rows" in f.message
    assert f.probe == "guard" and f.capture_size == 4 and f.details["replay"] == 0
    assert f.engine == ("emulate" if engine == "emulate" else "cuda")


def test_a_rebound_input_that_lives_on_is_unpersisted_metadata(engine):
    t, graphs, guard = captured(S.NewMetadata, engine)
    t.prepare(SMALL.padded(4))  # the captured self.lens lives on in self.history
    with pytest.raises(GuardError) as e:
        guard.before_replay(4)
    f = e.value.finding
    assert f.kind == FindingKind.UNPERSISTED_METADATA and f.where == "self.lens"
    assert "still held at self.history[" in f.message and "rebound" in f.message


def test_a_changed_host_value_is_frozen_host_value(engine):
    t, graphs, guard = captured(S.HostScale, engine)
    guard.before_replay(4, {"scale": 16.0})  # the capture's own value passes
    graphs[4].replay()
    guard2 = captured(S.HostScale, engine, mode="strict")[2]
    t2 = guard2.owner
    t2.prepare(SMALL.padded(4))
    with pytest.raises(GuardError) as e:
        guard2.before_replay(4, {"_scale_rows_host.scale": t2.scale})
    f = e.value.finding
    assert f.kind == FindingKind.FROZEN_HOST_VALUE and f.where == "_scale_rows_host.scale"
    assert f.details["captured"] == 16.0 and f.details["needed"] == 9.0


def test_host_values_given_at_capture_and_lazy_host_values(engine):
    t, graphs, guard = captured(S.Safe, engine, mode="sample", every=3)
    guard.capture(4)  # (a bare call records nothing)
    calls = []

    def values():
        calls.append(1)
        return {"D": 4}

    for _ in range(7):
        guard.before_replay(4, values)
    assert len(calls) == 3  # replays 0, 3 and 6 only
    eng = get_engine(engine)
    g2 = Guard(t, mode="strict")
    with g2.capture(key="decode", host_values={"uniform": True}):
        eng.capture(t.forward, pool=None)
    g2.before_replay("decode", {"uniform": True})
    with pytest.raises(GuardError) as e:
        g2.before_replay("decode", {"uniform": False})
    assert e.value.finding.where == "uniform" and "given to guard.capture" in e.value.finding.message


def test_the_safe_twin_passes_every_strict_check(engine):
    t, graphs, guard = captured(S.Safe, engine, sizes=(4, 2), mode="strict")
    for i in range(300):
        size = 2 if i % 2 else 4
        t.prepare(Batch((1,), (1 + i % 16,), ((1 + i % 8,),), seed=i + 1).padded(size))
        guard.before_replay(size)
        if i % 100 == 0:
            graphs[size].replay()
    assert guard.findings == [] and guard.stats()[4]["checks"] == 150


def test_sample_mode_checks_the_first_replay_then_every_nth(engine):
    t, graphs, guard = captured(S.Safe, engine, mode="sample", every=5)
    for _ in range(2):
        guard.before_replay(4)
    t.lens = torch.zeros_like(t.lens)  # a rebind at replay 2 (the old tensor freed)...
    for _ in range(3):
        guard.before_replay(4)  # ...is not looked at on replays 2-4
    with pytest.raises(GuardError) as e:
        guard.before_replay(4)  # replay 5 is checked
    assert e.value.finding.details["replay"] == 5 and e.value.finding.details["last_good_replay"] == 0
    assert "replay 0 (the last check, which passed)" in e.value.finding.message


def test_off_mode_records_nothing_and_calls_nothing(monkeypatch):
    class Watched:
        looked = 0

        def __getattribute__(self, name):
            type(self).looked += 1
            return object.__getattribute__(self, name)

    owner = Watched()
    monkeypatch.setattr(core, "Recorder", None)  # any recording would fail
    guard = Guard(owner, mode="off")
    with guard.capture(key=1):
        torch.ones(3).add_(1)
    assert guard.keys == () and not guard.enabled
    calls = []
    sys.setprofile(lambda frame, event, arg: calls.append((event, frame.f_code.co_name)))
    try:
        guard.before_replay(1, {"x": 1})
        guard.before_replay("never captured")
    finally:
        sys.setprofile(None)
    names = [n for ev, n in calls if ev == "call"]
    assert names == ["_skip", "_skip"], calls
    assert Watched.looked == 0
    replay = lambda: None  # noqa: E731
    assert guard.wrap(replay, key=1) is replay


def guarded_buffer():
    """An owner with one buffer and a strict guard over a raw capture reading it (the guard's own
    recording, as inside torch.cuda.graph: weak references only)."""
    o = SimpleNamespace(buf=torch.zeros(8, device=DEV))
    guard = Guard(o, mode="strict")
    with guard.capture(key=1):
        o.buf.mul_(2)
    return o, guard


def test_the_guard_keeps_no_captured_storage_alive():
    o, guard = guarded_buffer()
    weak = StorageWeakRef(o.buf.untyped_storage())
    del o.buf
    assert weak.expired()
    with pytest.raises(GuardError) as e:
        guard.before_replay(1)
    assert (
        e.value.finding.kind == FindingKind.STALE_POINTER and "self.buf no longer resolves" in e.value.finding.message
    )


def test_the_guard_adds_no_reference_on_the_emulator():
    eng = get_engine("emulate")
    uses = []
    for with_guard in (False, True):
        t = S.Safe()
        t.setup(S.SPEC, eng.device)
        t.prepare(S.SPEC.worst_case_batch(4))
        if with_guard:
            guard = Guard(t)
            with guard.capture(key=4):
                graph = eng.capture(t.forward, pool=None)
        else:
            graph = eng.capture(t.forward, pool=None)
        uses.append(torch._C._storage_Use_Count(t.lens.untyped_storage()._cdata))
        del graph
    assert uses[0] == uses[1]


def test_a_resized_storage_is_a_stale_pointer():
    o, guard = guarded_buffer()
    o.buf.untyped_storage().resize_(4096)  # same storage, memory reallocated (what FSDP does to parameters)
    with pytest.raises(GuardError) as e:
        guard.before_replay(1)
    assert e.value.finding.kind == FindingKind.STALE_POINTER and "reallocated in place" in e.value.finding.message


def test_skipped_replays_allocate_nothing():
    t, graphs, guard = captured(S.Safe, "emulate", mode="sample", every=100)
    guard.before_replay(4)  # the first replay is checked
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(98):
            guard.before_replay(4)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = [d for d in after.compare_to(before, "filename") if "graphsafe" in str(d.traceback) and d.size_diff > 0]
    assert grown == []


def test_log_mode_logs_each_finding_once_and_writes_its_report(tmp_path, caplog):
    t, graphs, guard = captured(
        S.FreshLens,
        "emulate",
        mode="strict",
        on_failure="log",
        report_dir=tmp_path,
        target="tests.targets.synthetic:FreshLens",
    )
    t.prepare(SMALL.padded(4))
    with caplog.at_level(logging.ERROR, logger="graphsafe.guard"):
        guard.before_replay(4)
        graphs[4].replay()  # log mode lets the replay go ahead
        guard.before_replay(4)
    assert len([r for r in caplog.records if "stale-pointer" in r.getMessage()]) == 1
    (f,) = guard.findings
    assert f.report_dir and load_finding(f.report_dir).kind == FindingKind.STALE_POINTER
    assert load_finding(f.report_dir).where == "self.lens"


def test_a_callable_on_failure_receives_each_new_finding():
    got = []
    t, graphs, guard = captured(S.NewMetadata, "emulate", mode="strict", on_failure=got.append)
    t.prepare(SMALL.padded(4))
    guard.before_replay(4)
    guard.before_replay(4)
    assert [f.kind for f in got] == [FindingKind.UNPERSISTED_METADATA]


def test_wrap_and_decorator_forms():
    eng = get_engine("emulate")
    t = S.FreshLens()
    t.setup(S.SPEC, eng.device)
    t.prepare(S.SPEC.worst_case_batch(4))
    guard = Guard(t, mode="strict")
    graphs = {}

    @guard.capture(key=4)
    def capture_4():
        graphs[4] = eng.capture(t.forward, pool=None)

    capture_4()
    replay = guard.wrap(graphs[4].replay, key=4)
    replay()
    t.prepare(SMALL.padded(4))
    with pytest.raises(GuardError):
        replay()
    assert guard.check(4)[0].kind == FindingKind.STALE_POINTER


def test_usage_errors():
    with pytest.raises(UsageError):
        Guard(mode="always")
    with pytest.raises(UsageError):
        Guard(every=0)
    with pytest.raises(UsageError):
        Guard(on_failure="print")
    t, graphs, guard = captured(S.HostScale, "emulate", mode="strict")
    with pytest.raises(UsageError):
        guard.before_replay(8)  # never captured
    with pytest.raises(UsageError):
        guard.before_replay(4, {"no_such_argument": 1})
    with pytest.raises(UsageError):
        guard.before_replay(4, {"x_ptr": 0})  # a tensor argument, not a host value
    eng = get_engine("emulate")
    with pytest.raises(UsageError):  # inside the engine's own recording: too late to record the capture
        eng.capture(lambda: guard.capture(key=5).__enter__(), pool=None)


def test_an_argument_with_several_captured_values_must_be_named_by_kernel():
    o = SimpleNamespace(x=torch.ones(8, 4, device=DEV), out=torch.zeros(8, 4, device=DEV))
    guard = Guard(o, mode="strict")
    with guard.capture(key=1):
        S._scale_rows_host[(8,)](o.x, o.out, 2.0, D=4)
        S._scale_rows_host[(8,)](o.out, o.out, 3.0, D=4)
    with pytest.raises(UsageError):
        guard.before_replay(1, {"scale": 2.0})
    guard.before_replay(1, {"D": 4, "_scale_rows_host.grid": (8,)})


def test_paths_through_dicts_lists_and_odd_keys_are_checked():
    o = SimpleNamespace(by_size={(4, "k"): torch.zeros(4), 2: [torch.zeros(4)]}, named={"a": torch.zeros(4)})
    guard = Guard(o, mode="strict", ignore=["self.named*"])
    with guard.capture(key=1):
        o.by_size[(4, "k")].add_(1)
        o.by_size[2][0].add_(1)
        o.named["a"].add_(1)
    assert guard.stats()[1] == {"storages": 3, "paths": 2, "host_values": 0, "checks": 0, "engine": "cpu"}
    keep = o.by_size[(4, "k")], o.named["a"]
    o.named["a"] = torch.zeros(4)  # an ignored path (its old tensor lives on in keep)
    guard.before_replay(1)
    o.by_size[(4, "k")] = torch.zeros(4)
    with pytest.raises(GuardError) as e:
        guard.before_replay(1)
    assert e.value.finding.where == "self.by_size[(4, 'k')]" and keep is not None


def test_recapture_replaces_and_forget_drops():
    t, graphs, guard = captured(S.Safe, "emulate", sizes=(4, 2), mode="strict")
    assert set(guard.keys) == {4, 2}
    guard.forget(2)
    assert guard.keys == (4,)
    guard.forget()
    assert guard.keys == ()


def test_from_env(monkeypatch):
    assert Guard.from_env().mode == "off"
    monkeypatch.setenv("GRAPHSAFE_GUARD", "sample")
    monkeypatch.setenv("GRAPHSAFE_GUARD_EVERY", "7")
    monkeypatch.setenv("GRAPHSAFE_GUARD_ON_FAILURE", "log")
    g = Guard.from_env(None, report_dir="r")
    assert (g.mode, g.every, g.on_failure, g.report_dir) == ("sample", 7, "log", "r")
    monkeypatch.setenv("GRAPHSAFE_GUARD_EVERY", "often")
    with pytest.raises(UsageError):
        Guard.from_env()


def test_guard_error_is_a_picklable_graphsafe_error_with_exit_code_1():
    t, graphs, guard = captured(S.FreshLens, "emulate", mode="strict")
    t.prepare(SMALL.padded(4))
    with pytest.raises(graphsafe.GraphsafeError) as e:
        guard.before_replay(4)
    again = pickle.loads(pickle.dumps(e.value))
    assert isinstance(again, GuardError) and again.finding.kind == FindingKind.STALE_POINTER
    assert graphsafe.errors.exit_code(again) == 1


def test_a_wrapped_replay_in_sample_mode_checks_the_first_replay_then_every_nth():
    o, guard = guarded_buffer()
    guard = Guard(o, mode="sample", every=3)
    with guard.capture(key=1):
        o.buf.mul_(2)
    calls = []
    replay = guard.wrap(lambda: calls.append(1), key=1)
    for _ in range(7):
        replay()
    assert len(calls) == 7 and guard.stats()[1]["checks"] == 3  # replays 1, 4 and 7
    o.buf = torch.zeros(8, device=DEV)  # rebound: the next checked replay (10) raises, 8 and 9 do not
    replay(), replay()
    with pytest.raises(GuardError):
        replay()

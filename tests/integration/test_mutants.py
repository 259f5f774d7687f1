"""benchmarks/mutation: operators make subclasses that differ from their subject only as they say, and the
ground truth (replay against a fresh eager instance per step, no graphsafe diagnosis) tells a real mutant from
an equivalent one (small subject, few steps)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from graphsafe.capture.statewalk import storage_key, walk
from graphsafe.capture.statics import static_dict
from graphsafe.engines import get_engine

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # benchmarks/ is not a package
subjects = importlib.import_module("mutation.subjects")
operators = importlib.import_module("mutation.operators")
truth = importlib.import_module("mutation.truth")

SUBJECT = "mla_indexer"


@pytest.fixture(scope="module")
def emulator():
    return get_engine("emulate", device="cpu")


@pytest.fixture(scope="module")
def profile(emulator):
    return subjects.profile(SUBJECT, subjects.subject_class(SUBJECT), emulator)


def mutant(profile, op_name):
    cls = subjects.subject_class(SUBJECT)
    op = operators.by_name(op_name)
    [(mid, _, buf)] = [m for m in operators.mutants_of(profile) if m[1] is op]
    return cls, op.make(cls, mid, buf), buf


def buffers(t):
    """Every tensor of ``t`` by path but its static ones (seeded from the class name: a mutant's differ)."""
    static = {storage_key(x) for x in static_dict(t).values()}
    return {path: x for path, x in walk(t) if storage_key(x) not in static}


def prepared(cls, batch):
    t = cls()
    t.setup(subjects.spec_of(cls), torch.device("cpu"))
    t.prepare(batch)
    return {path: x.clone() for path, x in buffers(t).items()}


def own_methods(cls):
    return {n for n, v in vars(cls).items() if callable(v)}


def test_the_profile_lists_the_metadata_prepare_writes_and_the_graph_reads(profile):
    written = {b.path for b in profile.written}
    assert {"self.seq_lens", "self.query_start_loc", "self.block_table"} <= written


def test_a_prepare_operator_overrides_prepare_alone(profile):
    cls, m, _ = mutant(profile, "drop_tail")
    assert issubclass(m, cls) and own_methods(m) == {"prepare"}


def test_a_forward_operator_overrides_forward_alone(profile):
    _, m, _ = mutant(profile, "sync_forward")
    assert own_methods(m) == {"forward"}


def test_drop_tail_changes_only_the_rows_past_the_live_ones(profile):
    cls, m, buf = mutant(profile, "drop_tail")
    spec = subjects.spec_of(cls)
    small = spec.worst_case_batch(2, seed=3).padded(spec.max_reqs)
    a, b = cls(), m()
    for t in (a, b):
        t.setup(spec, torch.device("cpu"))
        t.prepare(spec.worst_case_batch(spec.max_reqs, seed=2))  # a larger batch first fills every row
        t.prepare(small)
    before = buffers(a)
    for path, x in buffers(b).items():
        n = operators.live_count(buf.rows, small)
        if path == buf.path:
            assert torch.equal(x[:n], before[path][:n]) and not torch.equal(x[n:], before[path][n:])
        else:
            assert torch.equal(x, before[path]), path


def test_write_twice_leaves_every_buffer_as_the_subject_leaves_it(profile):
    cls, m, _ = mutant(profile, "write_twice")
    batch = subjects.spec_of(cls).worst_case_batch(3, seed=5)
    expected, got = prepared(cls, batch), prepared(m, batch)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[p], got[p]) for p in expected)


def test_ground_truth_marks_a_rebound_buffer_real(profile, emulator):
    _, m, _ = mutant(profile, "rebind_fresh")
    assert truth.ground_truth(m, emulator, sequences=1, steps=2)["truth"] == "real"


def test_ground_truth_marks_a_buffer_written_twice_equivalent(profile, emulator):
    _, m, _ = mutant(profile, "write_twice")
    assert truth.ground_truth(m, emulator, sequences=1, steps=3)["truth"] == "equivalent"


def test_ground_truth_marks_a_forward_that_reads_the_device_on_the_host_real(profile, emulator):
    _, m, _ = mutant(profile, "sync_forward")
    assert truth.ground_truth(m, emulator, sequences=1, steps=1)["symptom"] == "capture-failed"


def judged(truth_kind, expected, kinds_per_seed):
    campaign = importlib.import_module("mutants")
    row = {
        "operator": "lazy_guard",
        "truth": {"truth": truth_kind},
        "expected": expected,
        "checks": [{"kinds": k} for k in kinds_per_seed],
    }
    campaign._judge(row)
    return row


def test_the_right_kind_is_exactly_the_expected_kind_in_every_seed():
    assert judged("real", "lazy-init", [["lazy-init"], ["lazy-init"]])["right_kind"]
    extra = judged("real", "lazy-init", [["lazy-init"], ["lazy-init", "replay-mismatch"]])
    assert extra["detected"] and not extra["right_kind"]


def test_any_finding_on_an_equivalent_mutant_is_false():
    assert judged("equivalent", None, [[], ["frozen-host-value"]])["false_on_equivalent"]
    assert not judged("equivalent", None, [[], []])["false_on_equivalent"]


def test_a_rebound_buffer_expects_stale_pointer_only_where_the_graph_read_freed_memory():
    op = operators.by_name("rebind_fresh")
    assert op.expected_for(None, {"truth": "real", "symptom": "reads-freed-memory"}) == "stale-pointer"
    assert op.expected_for(None, {"truth": "real", "symptom": "output"}) == "unpersisted-metadata"


def test_a_mutant_named_by_live_imports_back_and_checks_in_a_sandbox(profile, tmp_path, monkeypatch):
    import json

    import graphsafe
    from graphsafe.frontend.sandbox.wire import target_ref

    live = importlib.import_module("mutation.live")
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps({SUBJECT: profile.to_dict()}))
    monkeypatch.setenv(live.PROFILES_ENV, str(profiles))
    monkeypatch.setenv(live.LIBRARY_ENV, "standin")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2] / "benchmarks"))
    op = operators.by_name("host_scalar")
    [(mid, _, buf)] = [m for m in operators.mutants_of(profile) if m[1] is op]
    cls = live.importable(op.make(subjects.subject_class(SUBJECT), mid, buf), mid)
    ref, by_class, why = target_ref(cls)
    assert ref == f"mutation.live:{cls.__qualname__}" and not why
    result = graphsafe.check(cls, engine="emulate", examples=4, seed=0, database=False, isolate="target", timeout=300)
    assert not any("without isolation" in n for n in result.notes)
    assert result.kinds == {"frozen-host-value"}

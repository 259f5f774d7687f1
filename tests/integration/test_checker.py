"""The checker: each synthetic hazard gets exactly its finding kind and path; safe twins get none."""

import pytest

import graphsafe
from graphsafe import Batch, ContractError, UsageError
from graphsafe.contract import CAPTURE_SEED
from tests.targets import synthetic as S

EXAMPLES = 12


def run(cls, engine, **kw):
    kw.setdefault("examples", EXAMPLES)
    return graphsafe.check(cls, engine=engine, database=False, seed=0, **kw)


@pytest.mark.parametrize("cls", list(S.EXPECTED), ids=lambda c: c.__name__)
def test_each_hazard_gets_exactly_its_kind_and_names_the_fault(cls, engine):
    kind, where = S.EXPECTED[cls]
    result = run(cls, engine)
    assert result.kinds == {kind}, result.summary()
    finding = result.errors[0]
    assert where in finding.where or where in finding.message, finding.summary()


@pytest.mark.parametrize("cls", S.TWINS, ids=lambda c: c.__name__)
def test_safe_twins_get_no_finding(cls, engine):
    result = run(cls, engine, examples=20)
    assert result.ok, result.summary()
    assert result.examples == 20 and result.steps >= 20


def test_findings_carry_the_minimal_step_sequence(engine):
    f = run(S.HostScale, engine).errors[0]
    assert f.step == len(f.batches) - 1
    assert len(f.batches) == 1 and f.batches[0].num_reqs == 1
    assert f.capture_batch is not None and f.capture_size >= 1
    assert f.examples_to_find >= 1


def test_frozen_host_value_names_captured_and_needed_values(engine):
    f = run(S.HostScale, engine).errors[0]
    assert "captured 16.0" in f.message and "needs 1.0" in f.message


def test_stale_pointer_names_address_and_replacement(engine):
    f = run(S.FreshLens, engine).errors[0]
    dead = f.details["dead"][0]
    assert dead["path"] == "self.lens"
    assert dead["address"].startswith("0x")
    assert dead["replacement"] and "self.lens now at 0x" in dead["replacement"][0]


def test_mismatches_map_to_request_and_token(engine):
    f = run(S.HostScale, engine).errors[0]
    pos = f.mismatches[0].first[0]
    assert pos["request"] == 0 and pos["token"] == 0


def test_a_replay_that_writes_nothing_fails_even_when_eager_filled_the_shared_output(engine):
    # the graph's output and the eager output are the same tensor; eager fills it right
    result = run(S.SharedOutputWritesNothing, engine)
    assert result.kinds == {"output-not-written"}


def test_the_reference_is_never_the_replays_tensor(engine):
    # graph and eager outputs alias; comparing without a copy would hide the frozen scale
    result = run(S.SharedOutput, engine)
    assert result.kinds == {"frozen-host-value"}


def test_every_replay_uses_inputs_different_from_the_captures(engine):
    S.Recording.SEEN.clear()
    run(S.Recording, engine, examples=10, capture="worst")
    sizes = len(graphsafe.CaptureSpec(max_reqs=4).default_capture_sizes())
    assert {seed for seed, _ in S.Recording.SEEN[:sizes]} == {CAPTURE_SEED}  # one capture-time prepare per size
    replay_seeds = [seed for seed, _ in S.Recording.SEEN[sizes:]]
    assert replay_seeds and CAPTURE_SEED not in replay_seeds


def test_probes_run_on_their_own(engine):
    # a lazy-init bug is not reported by the stale-pointer probe, and vice versa
    assert run(S.LazyPlan, engine, probes=["stale-pointer"]).ok
    assert run(S.LazyPlan, engine, probes=["lazy-init"]).kinds == {"lazy-init"}
    assert run(S.FreshLens, engine, probes=["lazy-init"]).ok


def test_capture_sizes_limit_what_is_captured(engine):
    result = run(S.Safe, engine, capture_sizes=[2], examples=5)
    assert result.ok
    with pytest.raises(ValueError, match="capture size"):
        run(S.Safe, engine, capture_sizes=[99])


def test_bitwise_mode_compares_exactly(engine):
    assert run(S.Safe, engine, tolerance=graphsafe.Tolerance(bitwise=True), examples=5).ok


def test_buffers_only_setup_writes_are_constants_named_in_the_notes(engine):
    class Undeclared(S.Safe):
        def setup(self, spec, device):
            super().setup(spec, device)
            self.w.normal_()

        def static(self):
            return {}

    result = run(Undeclared, engine)
    assert result.ok, result.summary()
    assert any("treated as constants" in n and "self.w" in n for n in result.notes), result.notes


# -- bad input ---------------------------------------------------------------------------------
def test_unknown_target_names_list_known_ones():
    with pytest.raises(UsageError, match="unknown target 'nope'"):
        graphsafe.check("nope")


def test_target_without_forward_is_rejected_naming_the_method():
    class NoForward(graphsafe.Target):
        def setup(self, spec, device):
            pass

        def prepare(self, batch):
            pass

    with pytest.raises(ContractError, match=r"forward\(\) is not implemented"):
        graphsafe.check(NoForward, engine="emulate")


def test_forward_returning_non_tensors_is_rejected_naming_forward():
    class ReturnsList(S.Safe):
        def forward(self):
            super().forward()
            return [1, 2]

    with pytest.raises(ContractError, match=r"forward\(\) must return a tensor"):
        graphsafe.check(ReturnsList, engine="emulate", database=False, examples=2)


def test_support_never_is_rejected():
    class Never(S.Safe):
        support = graphsafe.Support.NEVER

    with pytest.raises(ContractError, match="NEVER"):
        graphsafe.check(Never, engine="emulate")


def test_a_target_raising_in_prepare_is_a_target_error_finding(engine):
    class Raises(S.Safe):
        def prepare(self, batch):
            if batch.seed != CAPTURE_SEED:
                raise RuntimeError("boom in prepare")
            super().prepare(batch)

    result = run(Raises, engine, examples=3)
    assert result.kinds == {"target-error"}
    assert "boom in prepare" in result.errors[0].message


def test_reproduce_runs_one_exact_sequence(engine):
    steps = [Batch((1,), (3,), ((1,),), seed=4)]
    assert not graphsafe.reproduce(S.HostScale, steps, engine=engine).ok
    assert graphsafe.reproduce(S.DeviceScale, steps, engine=engine).ok

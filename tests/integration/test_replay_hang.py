"""A replay that never ends (a kernel fed stale plan data running away) is caught as soon as it has run far past
every replay before it, not at the check's timeout; a fresh process then runs that example again and decides the
cause without replaying that step, and where nothing explains it the check raises ReplayHung naming the step."""

from __future__ import annotations

import pytest

import graphsafe
from graphsafe.engines import replay_clock
from tests.targets.hangs import HangsInALaterPhase, HangsInReplay


@pytest.fixture
def short_floor(monkeypatch):
    # the parent process judges the child's replay clock: a short floor keeps the test short
    monkeypatch.setattr(replay_clock, "HANG_FLOOR_S", 3.0)


def isolated(cls, engine, **options) -> graphsafe.CheckResult:
    return graphsafe.check(cls, engine=engine, seed=0, database=False, isolate="target", timeout=600, **options)


def test_a_replay_that_never_ends_gets_its_cause_from_a_fresh_process_before_the_timeout(engine, short_floor):
    result = isolated(HangsInReplay, engine, examples=2, capture="worst")
    (f,) = result.findings
    assert f.kind.value == "frozen-host-value" and f.where == "_spin_until.total"
    assert "replay never ended" in f.message and "without replaying it" in f.message
    assert any("ran that example again in a fresh process" in n and "does not end" in n for n in result.notes)


def hung(**fields) -> graphsafe.ReplayHung:
    steps = [{"query_lens": [1], "seq_lens": [3], "seed": 1}]
    base = dict(steps=steps, step=0, size=1, seconds=30.0, capture={"policy": "worst", "batch": None})
    return graphsafe.ReplayHung("t: the replay of step 0 ran 30.0 s: a kernel that does not end", **{**base, **fields})


def test_a_hang_no_replay_free_probe_explains_stays_a_replay_hung_that_says_so():
    from graphsafe.findings import CheckResult
    from graphsafe.frontend.sandbox.faults import cause_elsewhere

    asked = []
    with pytest.raises(graphsafe.ReplayHung) as info:
        cause_elsewhere(
            hung(), lambda fault: asked.append(fault) or CheckResult("t", "emulate", HangsInReplay.default_spec, ())
        )
    assert asked[0]["step"] == 0 and asked[0]["capture"] == {"policy": "worst", "batch": None}
    assert "nothing that needs no replay" in info.value.message and info.value.step == 0 and info.value.steps


def test_a_fresh_process_that_fails_too_leaves_the_original_error_with_its_reason():
    from graphsafe.frontend.sandbox.faults import cause_elsewhere

    def ask(fault):
        raise graphsafe.TargetCrashed("t: the sandbox process died (SIGSEGV)")

    with pytest.raises(graphsafe.ReplayHung, match="failed too .TargetCrashed: t: the sandbox process died"):
        cause_elsewhere(hung(), ask)


def test_the_clock_is_overdue_only_past_the_floor_and_the_longest_replay_before():
    import ctypes
    from multiprocessing.sharedctypes import RawArray

    clock = replay_clock.Clock(RawArray(ctypes.c_double, replay_clock.NUMBERS), RawArray(ctypes.c_char, 64))
    replay_clock.install(clock)
    try:
        replay_clock.replay_started(4)
        replay_clock.replay_done()
        assert clock.overdue() is None  # nothing running
        replay_clock.replay_started(4)
        started = clock.numbers[1]
        longest = clock.numbers[2]
        assert clock.overdue(now=started + replay_clock.HANG_FLOOR_S / 2) is None
        late = clock.overdue(now=started + replay_clock.HANG_FLOOR_S + replay_clock.HANG_FACTOR * longest + 1)
        assert late is not None and late["size"] == 4
    finally:
        replay_clock.install(None)


def test_a_hang_that_names_no_example_is_raised_as_it_is():
    from graphsafe.frontend.sandbox.faults import cause_elsewhere

    err, asked = hung(steps=()), []
    with pytest.raises(graphsafe.ReplayHung) as info:
        cause_elsewhere(err, asked.append)
    assert info.value is err and not asked


def finding_of(kind: str, where: str):
    from graphsafe.findings import Finding, FindingKind

    return Finding(kind=FindingKind(kind), message=f"{kind} at {where}", where=where, cause=f"buffer:{where}")


def test_findings_of_the_phases_before_a_hang_are_kept_when_the_fresh_process_names_nothing():
    from graphsafe.findings import CheckResult
    from graphsafe.frontend.sandbox.faults import cause_elsewhere

    before = CheckResult("t", "emulate", HangsInReplay.default_spec, (), examples=7, steps=20)
    before.findings = [finding_of("lazy-init", "self.plan")]
    empty = CheckResult("t", "emulate", HangsInReplay.default_spec, ())
    result = cause_elsewhere(hung(), lambda fault: empty, before)
    assert [f.kind.value for f in result.findings] == ["lazy-init"] and result.examples == 7
    assert "nothing that needs no replay" in result.notes[-1] and "explains step 0" in result.notes[-1]
    assert "the findings of the phases before it (1) are kept" in result.notes[-1]


def test_the_fresh_processs_cause_joins_the_earlier_phases_findings():
    from graphsafe.findings import CheckResult
    from graphsafe.frontend.sandbox.faults import cause_elsewhere

    before = CheckResult("t", "emulate", HangsInReplay.default_spec, (), examples=7, steps=20)
    before.findings = [finding_of("lazy-init", "self.plan")]
    fresh = CheckResult("t", "emulate", HangsInReplay.default_spec, (), examples=1, steps=2)
    fresh.findings = [finding_of("stale-pointer", "self.lens")]
    result = cause_elsewhere(hung(), lambda fault: fresh, before)
    assert sorted(f.kind.value for f in result.findings) == ["lazy-init", "stale-pointer"]
    assert result.examples == 7 and result.steps == 22
    assert "without replaying it" in next(f.message for f in result.findings if f.kind.value == "stale-pointer")


def test_a_later_phases_hang_keeps_the_first_phases_finding(engine, short_floor):
    result = isolated(HangsInALaterPhase, engine, examples=12, capture=("worst", "minimal"))
    (f,) = result.findings  # the first phase's, and the fresh process's for the hang: one cause
    assert f.kind.value == "frozen-host-value" and f.details["capture_policy"] == "worst"
    assert any("the findings of the phases before it (1) are kept" in n and "fresh process" in n for n in result.notes)


def test_the_clock_tells_how_the_hung_example_was_captured():
    import ctypes
    from multiprocessing.sharedctypes import RawArray

    from graphsafe.contract import Batch

    clock = replay_clock.Clock(
        RawArray(ctypes.c_double, replay_clock.NUMBERS), RawArray(ctypes.c_char, replay_clock.PLAN_BYTES)
    )
    replay_clock.install(clock)
    try:
        drawn = {"policy": "drawn", "batch": Batch((1,), (6,), ((1, 2),), seed=11).to_dict()}
        replay_clock.example([Batch((1,), (2,), ((1,),), seed=5)], lambda: drawn)
        replay_clock.step(0)
        replay_clock.replay_started(1)
        late = clock.overdue(now=clock.numbers[1] + replay_clock.HANG_FLOOR_S + 1)
        assert late is not None and late["capture"] == drawn and late["steps"][0]["seq_lens"] == [2]
    finally:
        replay_clock.install(None)

"""A replay that never ends (a kernel fed stale plan data running away) is reported as soon as it has run
far past every replay before it, with the step whose replay it was, not at the check's timeout."""

from __future__ import annotations

import pytest

import graphsafe
from graphsafe.engines import replay_clock
from tests.targets.hangs import HangsInReplay


@pytest.fixture
def short_floor(monkeypatch):
    # the parent process judges the child's replay clock: a short floor keeps the test short
    monkeypatch.setattr(replay_clock, "HANG_FLOOR_S", 3.0)


def test_a_replay_that_never_ends_is_reported_with_its_step_before_the_timeout(engine, short_floor):
    with pytest.raises(graphsafe.ReplayHung) as info:
        graphsafe.check(
            HangsInReplay,
            engine=engine,
            examples=2,
            seed=0,
            database=False,
            capture="worst",
            isolate="target",
            timeout=600,
        )
    err = info.value
    assert isinstance(err, graphsafe.TargetTimeout) and err.exit_code == 3
    assert err.steps and 0 <= err.step < len(err.steps)
    assert err.seconds >= 3.0 and "does not end" in err.message
    assert f"seq_lens={err.steps[err.step]['seq_lens']}" in err.message


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

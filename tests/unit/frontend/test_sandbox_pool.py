"""The sandbox pool (graphsafe/frontend/sandbox/pool.py): which idle children it stops to make room."""

from __future__ import annotations

import pytest

from graphsafe.frontend.sandbox import pool


class FakeBox:
    """What the pool asks of a sandbox: alive, idle (waiting for a request, or starting), close()."""

    def __init__(self) -> None:
        self.alive, self.idle, self.closed = True, True, False

    def close(self) -> None:
        self.alive, self.closed = False, True


@pytest.fixture
def two_live(monkeypatch):
    monkeypatch.setattr(pool, "MAX_LIVE", 2)
    p = pool._Pool()
    a, b = FakeBox(), FakeBox()
    p.boxes = {("a",): a, ("b",): b}
    p.touched(a)
    p.touched(b)
    return p, a, b


def test_a_new_child_beyond_the_limit_stops_the_least_recently_used_idle_one(two_live):
    p, a, b = two_live
    c = FakeBox()
    p.boxes[("c",)] = c
    p.started(c)
    assert a.closed and not b.closed and not c.closed


def test_a_child_a_check_is_using_is_never_stopped_even_while_it_waits_for_its_request(two_live):
    p, a, b = two_live  # another thread's check of `a` has started it and is about to send the request
    c = FakeBox()
    p.boxes[("c",)] = c
    with p.using(a):
        p.started(c)
        assert not a.closed and b.closed  # the next least recently used idle one made room instead
    assert p.in_use == {}


def test_a_busy_child_is_never_stopped(two_live):
    p, a, b = two_live
    a.idle = b.idle = False
    c = FakeBox()
    p.boxes[("c",)] = c
    p.started(c)
    assert not a.closed and not b.closed  # over the limit until one is idle again

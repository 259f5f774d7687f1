"""Ctrl-C during ``graphsafe check``: remembered even when Python swallows the KeyboardInterrupt (one raised
inside a garbage-collector callback), and then not printed as a traceback."""

import sys
import types

import pytest

from graphsafe.frontend.cli import _InterruptLatch


@pytest.fixture
def latch():
    before = sys.unraisablehook
    seen = []

    def hook(info):
        seen.append(info)

    sys.unraisablehook = hook
    made = _InterruptLatch()
    yield made, seen
    made.close()
    assert sys.unraisablehook is hook, "closing the latch gives the hook back"
    sys.unraisablehook = before


def test_a_swallowed_interrupt_after_ctrl_c_is_not_printed(latch):
    made, seen = latch
    made.hit = True
    sys.unraisablehook(types.SimpleNamespace(exc_value=KeyboardInterrupt()))
    assert seen == []
    with pytest.raises(KeyboardInterrupt):
        made.check()


def test_other_unraisable_exceptions_go_to_the_hook_there_was_before(latch):
    made, seen = latch
    made.hit = True
    error = types.SimpleNamespace(exc_value=ValueError("in a finaliser"))
    sys.unraisablehook(error)
    assert seen == [error]


def test_an_interrupt_the_latch_did_not_see_is_printed(latch):
    made, seen = latch
    info = types.SimpleNamespace(exc_value=KeyboardInterrupt())
    sys.unraisablehook(info)
    assert seen == [info]

"""Ctrl-C during ``graphsafe check``: remembered even when Python swallows the KeyboardInterrupt (one raised
inside a garbage-collector callback), and then not printed as a traceback."""

import contextlib
import signal
import sys
import types

import pytest

from graphsafe.frontend.cli import _InterruptLatch


@contextlib.contextmanager
def latch_over_a_recording_hook():
    """A latch made over a hook that records what reaches it; both undone after.  Made inside the test's
    body: pytest may swap ``sys.unraisablehook`` for its own around each test call.  Ctrl-C raises meanwhile, as
    in a terminal: a run started in the background inherits SIGINT ignored, and then the latch hooks nothing."""
    before, before_sigint = sys.unraisablehook, signal.signal(signal.SIGINT, signal.default_int_handler)
    seen = []

    def hook(info):
        seen.append(info)

    sys.unraisablehook = hook
    made = _InterruptLatch()
    try:
        yield made, seen
    finally:
        made.close()
        restored = sys.unraisablehook is hook
        sys.unraisablehook = before
        signal.signal(signal.SIGINT, before_sigint)
    assert restored, "closing the latch gives the hook back"


def test_a_swallowed_interrupt_after_ctrl_c_is_not_printed():
    with latch_over_a_recording_hook() as (made, seen):
        made.hit = True
        sys.unraisablehook(types.SimpleNamespace(exc_value=KeyboardInterrupt()))
        assert seen == []
        with pytest.raises(KeyboardInterrupt):
            made.check()


def test_other_unraisable_exceptions_go_to_the_hook_there_was_before():
    with latch_over_a_recording_hook() as (made, seen):
        made.hit = True
        error = types.SimpleNamespace(exc_value=ValueError("in a finaliser"))
        sys.unraisablehook(error)
        assert seen == [error]


def test_an_interrupt_the_latch_did_not_see_is_printed():
    with latch_over_a_recording_hook() as (made, seen):
        info = types.SimpleNamespace(exc_value=KeyboardInterrupt())
        sys.unraisablehook(info)
        assert seen == [info]

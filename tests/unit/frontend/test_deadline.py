"""The in-process deadline (``check(timeout=...)`` without isolation): it stops a hang in Python code, names
where it was, and never cuts an import short."""

import sys

import pytest

from graphsafe.errors import TargetTimeout
from graphsafe.frontend.inprocess import deadline

pytestmark = pytest.mark.skipif(not hasattr(__import__("signal"), "SIGALRM"), reason="needs SIGALRM (POSIX)")


def spin():
    while True:
        pass


def test_a_hang_in_python_code_is_stopped_with_where_it_was():
    with pytest.raises(TargetTimeout) as info:  # spin() never returns: only the deadline ends it
        with deadline(0.3, "spinner"):
            spin()
    assert "spinner: no result within 0.3 s" in str(info.value)
    assert info.value.where.endswith(" in spin")


def test_a_deadline_that_falls_inside_an_import_waits_for_the_import_to_finish(tmp_path, monkeypatch):
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.8)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_to_import", raising=False)
    with pytest.raises(TargetTimeout) as info:
        with deadline(0.2, "importer"):
            import slow_to_import  # noqa: F401

            spin()
    assert sys.modules["slow_to_import"].DONE, "the import ran to its end"
    assert info.value.where.endswith(" in spin"), "the deadline stopped the hang after the import, not the import"


def test_a_deadline_that_a_library_turns_into_an_error_of_its_own_is_still_a_timeout():
    # Hypothesis, interrupted while it sets up a search, fails an internal assertion instead of passing it on
    with pytest.raises(TargetTimeout) as info:
        with deadline(0.2, "wrapped"):
            try:
                spin()
            except BaseException:
                raise AssertionError("a library's own state check") from None
    assert "wrapped: no result within 0.2 s" in str(info.value)


def test_an_error_before_the_deadline_fires_stays_that_error():
    with pytest.raises(ValueError, match="the target's own"):
        with deadline(5.0, "quick"):
            raise ValueError("the target's own")

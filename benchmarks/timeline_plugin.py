"""A pytest plugin that appends when each process reaches each phase of a run to a file.

Used by ``suite_timeline.py``: ``GRAPHSAFE_TIMELINE=FILE`` and ``GRAPHSAFE_TIMELINE_T0=<time.time()
when the command started>`` in the environment, ``-p timeline_plugin`` with this folder on
``PYTHONPATH``.  Each line is ``TL <seconds since T0> <ctl|gwN> <event> [nodeid]``; the first
event, ``plugin-import``, is written when pytest imports this module, before graphsafe's plugin.
"""

from __future__ import annotations

import os
import time


def _mark(event: str) -> None:
    path = os.environ.get("GRAPHSAFE_TIMELINE")
    if not path:
        return
    t = time.time() - float(os.environ.get("GRAPHSAFE_TIMELINE_T0", "0"))
    who = os.environ.get("PYTEST_XDIST_WORKER", "ctl")
    with open(path, "a") as f:  # one short append per line: whole lines from every process
        f.write(f"TL {t:.3f} {who} {event}\n")


_mark("plugin-import")


def pytest_configure(config) -> None:
    _mark("configure")


def pytest_runtest_logstart(nodeid, location) -> None:
    _mark("start " + nodeid)


def pytest_runtest_logfinish(nodeid, location) -> None:
    _mark("end " + nodeid)


def pytest_unconfigure(config) -> None:
    _mark("unconfigure")

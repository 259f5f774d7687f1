"""Which process of a pytest-xdist run this is (graphsafe/frontend/plugin.py): the controller, which runs
no item and so imports nothing heavy at start-up, a worker, or pytest's own process without xdist."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from graphsafe.frontend.plugin import xdist_controller, xdist_worker


def early(**given):
    """A config at ``pytest_load_initial_conftests``: the known arguments only (xdist's defaults)."""
    ns = {"numprocesses": None, "dist": "no", "tx": [], "distload": False, "collectonly": False, "usepdb": False}
    return SimpleNamespace(known_args_namespace=SimpleNamespace(**{**ns, **given}))


def late(**given):
    """A config at ``pytest_configure``, after xdist's ``pytest_cmdline_main`` turned ``-n`` into ``--tx``."""
    ns = {"numprocesses": None, "dist": "no", "tx": [], "collectonly": False}
    return SimpleNamespace(option=SimpleNamespace(**{**ns, **given}))


@pytest.fixture(autouse=True)
def not_a_worker(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)


@pytest.mark.parametrize("n", [1, 2, "auto", "logical"])
def test_dash_n_makes_a_controller_before_xdist_converts_it(n):
    assert xdist_controller(early(numprocesses=n), early=True)


def test_tx_with_a_distribution_mode_makes_a_controller():
    assert xdist_controller(early(dist="load", tx=["2*popen"]), early=True)
    assert xdist_controller(early(distload=True, tx=["popen"]), early=True)  # -d
    assert xdist_controller(late(dist="load", tx=["popen", "popen"]))


def test_dash_n_0_is_not_a_controller():
    assert not xdist_controller(early(numprocesses=0), early=True)
    assert not xdist_controller(late(numprocesses=0, dist="no", tx=[]))


def test_auto_with_pdb_or_no_cores_is_not_a_controller(monkeypatch):
    assert not xdist_controller(early(numprocesses="auto", usepdb=True), early=True)
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "0")
    assert not xdist_controller(early(numprocesses="auto"), early=True)


def test_collect_only_is_not_a_controller():
    assert not xdist_controller(early(numprocesses=2, collectonly=True), early=True)
    assert not xdist_controller(late(dist="load", tx=["popen"], collectonly=True))


def test_a_run_without_xdist_is_not_a_controller():
    assert not xdist_controller(SimpleNamespace(known_args_namespace=SimpleNamespace()), early=True)  # -p no:xdist
    assert not xdist_controller(SimpleNamespace(option=SimpleNamespace()))
    assert not xdist_controller(early(), early=True)
    assert not xdist_controller(late())
    assert not xdist_controller(late(dist="load", tx=[]))  # --dist without workers


def test_a_worker_is_not_a_controller(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")  # set before the worker's first hook
    config = early(numprocesses=2)  # a worker is given the controller's arguments
    assert xdist_worker(config) and not xdist_controller(config, early=True)
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    worker = late(dist="load", tx=["popen"])
    worker.workerinput = {}
    assert xdist_worker(worker) and not xdist_controller(worker)

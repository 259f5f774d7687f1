"""Helpers for tests that run pytest or graphsafe in a fresh process."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: variables of the outer test run that must not leak into a nested one
OUTER_RUN_VARS = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS", "CI", "GRAPHSAFE_DB")


def with_path(*dirs: str | os.PathLike) -> str:
    """``PYTHONPATH`` with ``dirs`` in front of what it holds now."""
    return os.pathsep.join(filter(None, [*map(str, dirs), os.environ.get("PYTHONPATH")]))


def env_with_repo() -> dict[str, str]:
    """This process's environment for a child that imports ``tests.*`` from the repository."""
    env = {k: v for k, v in os.environ.items() if k not in OUTER_RUN_VARS}
    env["PYTHONPATH"] = with_path(REPO)
    return env


def plugin_args() -> list[str]:
    """``-p`` options for graphsafe's plugin and xdist, needed only when plugin autoload is off.

    (Naming an autoloaded plugin again with -p makes pytest refuse to start.)
    """
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return ["-p", "graphsafe.frontend.plugin", "-p", "xdist.plugin"]
    return []


def failure_sections(result: pytest.RunResult, heading: str = "FAILURES") -> dict[str, str]:
    """Failure headline (test id) -> the text pytest printed under it (captured output dropped)."""
    text = result.stdout.str()
    body = text.split(f"= {heading} =", 1)[-1].split("short test summary info", 1)[0].split("= FAILURES =", 1)[0]
    parts = re.split(r"^_{3,} (.+?) _{3,}$", body, flags=re.M)
    out = {}
    for i in range(1, len(parts) - 1, 2):
        section = re.split(r"^-{3,} Captured ", parts[i + 1], flags=re.M)[0]
        section = re.sub(r"^\[gw\d+\] .*\n", "", section.strip())  # xdist: which worker ran it
        out[parts[i].strip()] = section.strip().strip("=").strip()
    return out


def error_sections(result: pytest.RunResult) -> dict[str, str]:
    """Like :func:`failure_sections`, for the ERRORS part (items whose setup failed)."""
    return {k.removeprefix("ERROR at setup of ").strip(): v for k, v in failure_sections(result, "ERRORS").items()}

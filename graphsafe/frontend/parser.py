"""The ``graphsafe`` command's grammar: its subcommands, options and their help (one parser for all of them).

:func:`build_parser` is what ``graphsafe --help`` prints and what the documentation's command-line reference
is generated from; :mod:`graphsafe.frontend.cli` runs what it parses.
"""

from __future__ import annotations

import argparse

from .. import defaults
from .._version import __version__
from ..capture.policies import POLICIES
from ..checker.audit import AUDIT_CAPTURE
from ..diagnosis import PROBES

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="graphsafe",
        description="Find CUDA-graph capture hazards in attention backends and GPU kernels.",
    )
    p.add_argument("--version", action="version", version=f"graphsafe {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    c = sub.add_parser(
        "check",
        help="check targets and print a table of findings",
        description="Capture each TARGET, replay drawn step sequences and report hazards.",
    )
    c.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="'module:Class', a registered name (see 'graphsafe list'), or 'all'",
    )
    c.add_argument(
        "--engine", default=None, help="auto (default: cuda when a GPU is visible, else emulate), cuda or emulate"
    )
    c.add_argument(
        "--examples",
        default=None,
        metavar="N",
        help=f"Hypothesis examples per target (default: the --profile's, else {defaults.EXAMPLES})",
    )
    c.add_argument(
        "--steps", default=None, metavar="N", help=f"most batches per step sequence (default {defaults.STEPS})"
    )
    c.add_argument(
        "--probes", default=None, metavar="P1,P2", help=f"finding kinds to report (default: all): {', '.join(PROBES)}"
    )
    c.add_argument("--capture-sizes", default=None, metavar="1,2,4", help="capture sizes (default: the target's)")
    c.add_argument(
        "--capture",
        default=None,
        metavar="POLICIES",
        help=f"how graphs are captured: {defaults.CAPTURE} (default) or some of {', '.join(POLICIES)}",
    )
    c.add_argument("--report-dir", default=None, metavar="DIR", help="write a report for each finding under DIR")
    c.add_argument("--seed", default=None, metavar="S", help="Hypothesis seed")
    c.add_argument(
        "--profile",
        default=None,
        metavar="P",
        help="Hypothesis profile: fast, ci or thorough (default: Hypothesis' current settings)",
    )
    c.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="check each target in a process of its own: a crash or hang marks its row CRASH or "
        "TIMEOUT and the run goes on (default: on where checks run on CUDA, where one crash breaks "
        "the process's CUDA context for every later target; off on the emulator)",
    )
    c.add_argument(
        "--timeout",
        default=None,
        metavar="SECONDS",
        help=f"seconds a target's check may take before it is stopped (default {defaults.TIMEOUT_S:g})",
    )
    c.add_argument(
        "--jobs",
        default=None,
        metavar="K",
        help="check K targets at once, each in its own process (default 1); auto: one per GPU on CUDA, "
        "else half the CPU cores. Checks on CUDA take the visible GPUs in turn",
    )
    c.add_argument(
        "--shard",
        default=None,
        metavar="K/N",
        help="check only shard K of N of the targets (a CI matrix): every target falls in exactly one "
        "shard, buggy variants spread first",
    )
    c.add_argument(
        "--database",
        default=None,
        metavar="DB",
        help="Hypothesis example database: a directory or a redis://host:port/db URL (default: $GRAPHSAFE_DB, "
        "else .hypothesis/graphsafe unless the --profile keeps none)",
    )
    c.add_argument(
        "--expected",
        action="store_true",
        help="compare each target's findings with its 'expected' attribute (the reference kernels): "
        "exit 0 when every verdict is the expected one",
    )
    c.add_argument("--debug", action="store_true", help="print tracebacks for every error, not only internal ones")

    a = sub.add_parser(
        "audit",
        help="which batches can each target's graph safely serve?",
        description="Check each TARGET on every batch kind (decode, uniform q = 1 + k, mixed) under "
        "each capture policy, and compare the highest safe Support level with the "
        "declared one. Exit 1 when a declared level is higher than the safe one.",
    )
    a.add_argument("targets", nargs="+", metavar="TARGET", help="'module:Class', a registered name, or 'all'")
    a.add_argument("--engine", default=None, help="auto (default), cuda or emulate")
    a.add_argument(
        "--examples",
        default=None,
        metavar="N",
        help=f"Hypothesis examples per cell (default {defaults.AUDIT_EXAMPLES})",
    )
    a.add_argument(
        "--capture",
        default=",".join(AUDIT_CAPTURE),
        metavar="POLICIES",
        help=f"capture policies, the table's columns (default {','.join(AUDIT_CAPTURE)})",
    )
    a.add_argument("--report-dir", default=None, metavar="DIR", help="write <target>/audit.md and audit.json under DIR")
    a.add_argument("--seed", default=None, metavar="S", help="Hypothesis seed")
    a.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run each cell's check in the target's own process (default: on where checks run on CUDA)",
    )
    a.add_argument("--timeout", default=None, metavar="SECONDS", help="seconds one cell's check may take")

    sub.add_parser("list", help="list registered targets", description="Registered targets, one per line.")

    r = sub.add_parser("repro", help="rerun a finding's report", description="Rerun the step sequence of a report.")
    r.add_argument("path", metavar="PATH", help="a report directory (or its repro file)")
    r.add_argument("--engine", default=None, help="auto, cuda or emulate (default: the engine the report recorded)")
    r.add_argument(
        "--timeout",
        default=None,
        metavar="SECONDS",
        help=f"seconds before a hanging replay is stopped (default {defaults.TIMEOUT_S:g})",
    )
    return p

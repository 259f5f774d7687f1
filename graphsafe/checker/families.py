"""The table of target families: every package that registers targets for a library, as one row.

Each row names a package whose ``FAMILY`` (a :class:`~graphsafe.family.Family`) holds its registry, its
library's load, version and requirement, and its engine's capture policy.  The packages are imported on first
use: the reference kernels switch Triton to its interpreter when no GPU is present, which must not happen as a
side effect of importing graphsafe.  A new engine is a package with a ``FAMILY`` and a row here.
"""

from __future__ import annotations

import functools
import importlib

from ..family import Family

__all__ = ["ROWS", "families", "family", "family_of"]

#: the packages, in the order ``graphsafe list`` shows them (the reference kernels first)
ROWS = (
    "graphsafe.reference",
    "graphsafe.flashinfer",
    "graphsafe.vllm",
    "graphsafe.sglang",
)


@functools.cache
def family(package: str) -> Family:
    """The family of ``package`` (imported now)."""
    fam = importlib.import_module(package).FAMILY
    assert isinstance(fam, Family), f"{package}.FAMILY is not a graphsafe Family"
    return fam


def families(in_all: bool | None = None) -> list[Family]:
    """Every family of the table (those ``all`` includes, or those it does not, with ``in_all``)."""
    out = [family(p) for p in ROWS]
    return out if in_all is None else [f for f in out if f.in_all == in_all]


def family_of(name: str) -> Family | None:
    """The family that owns target name ``name`` (registered or by reference), else None."""
    for fam in families():
        if fam.owns(name):
            return fam
    return None

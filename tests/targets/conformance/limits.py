"""The cases where the CPU emulator cannot give CUDA's verdict, each with what it says instead and why.

``tests/integration/test_conformance.py`` holds the emulator to exactly these: a listed case must still
give the listed verdict (a fixed emulator fails the test until the entry goes), every other case must
give CUDA's.  None may be a finding where CUDA replays correctly.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limit", "EXCEPTIONS"]


@dataclass(frozen=True)
class Limit:
    emulator: str  # the verdict the emulator gives
    reason: str


EXCEPTIONS: dict[str, Limit] = {}

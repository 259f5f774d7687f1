"""Replays that fault (an illegal memory access) as the emulator would see them, where nothing can fault.

A fault breaks the whole CUDA context: after it, :func:`device` says the engine is unhealthy and every
later call of these targets raises, whatever it does, as every CUDA call does on a broken context.  The
first fault comes in ``prepare()`` of a replay step whose longest sequence is past ``FAULT_PAST`` (where a
real fault surfaces: at the first call after the faulting replay).  ``DEVICE["calls_after"]`` counts the
calls made on the dead device.  A real fault on CUDA: ``tests.targets.broken.IllegalAccessOnReplay``.
"""

from __future__ import annotations

from graphsafe.contract import CAPTURE_SEED
from tests.targets.synthetic import NewMetadata, Safe

FAULT_PAST = 6
DEVICE = {"faulted": False, "calls_after": 0}


def reset() -> None:
    DEVICE.update(faulted=False, calls_after=0)


def healthy(_engine=None) -> bool:
    """What ``Engine.healthy()`` says on this stand-in device."""
    return not DEVICE["faulted"]


def _call(batch=None) -> None:
    if DEVICE["faulted"]:
        DEVICE["calls_after"] += 1
        raise RuntimeError("CUDA error: an illegal memory access was encountered (a later call)")
    if batch is not None and batch.seed != CAPTURE_SEED and max(batch.seq_lens) > FAULT_PAST:
        DEVICE["faulted"] = True
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


class _Faults:
    def setup(self, spec, device):
        _call()
        super().setup(spec, device)

    def prepare(self, batch):
        _call(batch)
        super().prepare(batch)

    def forward(self):
        _call()
        return super().forward()


class FaultsOnLongReplay(_Faults, Safe):
    """Safe but for the fault: a replay step with a sequence longer than ``FAULT_PAST`` faults."""


class StalePointerThenFault(_Faults, NewMetadata):
    """A bug found at once (metadata in a new tensor each step), and a fault on long replay steps."""

"""Targets that break their process, or graphsafe's contract, on purpose.

Every one is ``tests.targets.synthetic.Safe`` with one thing broken.  Replay steps are
told from the capture by their seed: the capture batch always has
``graphsafe.contract.CAPTURE_SEED``, no replayed batch does.

Process breakers (run them in a sandbox: ``--graphsafe-isolate target``):

* ``SegfaultsInPrepare``: prepare() of a replay step reads address 0 (SIGSEGV).
* ``CrashesOnce``: the same, but only until the file named by ``$GRAPHSAFE_CRASH_ONCE``
  exists (it creates it just before crashing): a fresh process then passes.
* ``HangsInPrepare``: prepare() of a replay step sleeps for an hour.
* ``RaisesInSetup`` / ``RaisesInPrepare`` / ``RaisesInForward``: ordinary exceptions
  (graphsafe reports a ``target-error`` finding; the process is fine).

CUDA only (their setup() refuses any other device, so they are harmless, and
useless, on the CPU emulator):

* ``ItemOnlyInCapture``: forward() calls ``.item()`` only while
  ``graphsafe.capturing()``: the eager pre-screen passes, graphsafe's recorder
  stops the read inside the capture (capture-failure, the context stays usable).
* ``BreaksContextInCapture``: the same read made past the recorder, as a C++
  extension would: the driver invalidates the capture and the process's CUDA
  state is left unusable.
* ``IllegalAccessOnReplay``: a Triton kernel stores at ``ptr + idx`` where prepare
  sets the device-side ``idx`` to ``1 << 40`` on replay steps (an illegal address).
* ``HangsOnReplay``: a Triton kernel spins on a device flag nobody sets, on replay
  steps only.

Contract breakers (graphsafe must refuse them with a one-line message):
``NoForward``, ``ForwardNotImplemented``, ``SupportNever``, ``SupportBogus``,
``DefaultSpecDict``, ``ForwardReturnsInt``, ``ForwardReturnsNothing``,
``StaticNotHeld``, ``StaticNotTensor``, ``StaticNotDict``, ``ShortOutput``,
``LiveReturnsInt``.
"""

from __future__ import annotations

import ctypes
import os
import time

import torch
import triton
import triton.language as tl

import graphsafe
from graphsafe.contract import CAPTURE_SEED
from tests.targets import plain_torch as torch_targets
from tests.targets.synthetic import D, Safe

__all__ = [
    "SegfaultsInPrepare",
    "CrashesOnce",
    "HangsInPrepare",
    "RaisesInSetup",
    "RaisesInPrepare",
    "RaisesInForward",
    "ItemOnlyInCapture",
    "BreaksContextInCapture",
    "IllegalAccessOnReplay",
    "HangsOnReplay",
    "NoForward",
    "ForwardNotImplemented",
    "SupportNever",
    "SupportBogus",
    "DefaultSpecDict",
    "ForwardReturnsInt",
    "ForwardReturnsNothing",
    "StaticNotHeld",
    "StaticNotTensor",
    "StaticNotDict",
    "ShortOutput",
    "LiveReturnsInt",
]


def replay_step(batch: graphsafe.Batch) -> bool:
    """True for every batch but the capture batch."""
    return batch.seed != CAPTURE_SEED


# -- breaks the process -------------------------------------------------------------------------
class SegfaultsInPrepare(Safe):
    """prepare() of a replay step dereferences a null pointer: the process dies with SIGSEGV."""

    def prepare(self, batch):
        super().prepare(batch)
        if replay_step(batch):
            ctypes.string_at(0)  # read address 0


class CrashesOnce(Safe):
    """Segfaults on a replay step until ``$GRAPHSAFE_CRASH_ONCE`` names an existing file; creates it first."""

    def prepare(self, batch):
        super().prepare(batch)
        marker = os.environ.get("GRAPHSAFE_CRASH_ONCE")
        if replay_step(batch) and not (marker and os.path.exists(marker)):
            if marker:
                open(marker, "w").close()
            ctypes.string_at(0)


class HangsInPrepare(Safe):
    """prepare() of a replay step blocks for an hour (a lock never released, a dead peer)."""

    def prepare(self, batch):
        super().prepare(batch)
        if replay_step(batch):
            time.sleep(3600)


# -- raises (the process is fine) -------------------------------------------------------------
class RaisesInSetup(Safe):
    """setup() raises."""

    def setup(self, spec, device):
        raise RuntimeError("setup is broken on purpose")


class RaisesInPrepare(Safe):
    """prepare() of a replay step raises."""

    def prepare(self, batch):
        super().prepare(batch)
        if replay_step(batch):
            raise RuntimeError("prepare is broken on purpose")


class RaisesInForward(Safe):
    """forward() raises, eagerly too."""

    def forward(self):
        raise RuntimeError("forward is broken on purpose")


# -- CUDA only ----------------------------------------------------------------------------------
def _require_cuda(target: object, device) -> None:
    if torch.device(device).type != "cuda":
        raise RuntimeError(f"{type(target).__name__} needs a CUDA device (it breaks the CUDA context on purpose)")


class ItemOnlyInCapture(Safe):
    """forward() calls ``.item()`` on a device value, but only inside a real capture.

    The eager warm-up and the sync-debug pre-screen see no host sync; graphsafe's
    capture recorder stops the ``.item()`` before CUDA sees it, so the check reports
    capture-failure and the process's CUDA context stays usable.
    """

    def setup(self, spec, device):
        _require_cuda(self, device)
        super().setup(spec, device)

    def forward(self):
        out = super().forward()
        if graphsafe.capturing() and out.is_cuda:
            out.sum().item()  # a host sync inside capture
        return out


class BreaksContextInCapture(ItemOnlyInCapture):
    """The same host read, done past graphsafe's recorder (as a C++ extension's would be).

    The driver itself rejects it, the capture is invalidated, and the process's
    CUDA state is left unusable (the next CUDA random call fails).
    """

    def forward(self):
        from torch.utils._python_dispatch import _disable_current_modes

        out = Safe.forward(self)
        if graphsafe.capturing() and out.is_cuda:
            with _disable_current_modes():  # no dispatch mode sees this read
                out.sum().item()
        return out


@triton.jit
def _store_at(out_ptr, idx_ptr):
    """out[idx[0]] = 1.0, with the index read on the device."""
    idx = tl.load(idx_ptr)
    tl.store(out_ptr + idx, 1.0)


class IllegalAccessOnReplay(Safe):
    """On replay steps prepare() sets a device-side index to 1 << 40: the kernel stores far out of bounds."""

    def setup(self, spec, device):
        _require_cuda(self, device)
        super().setup(spec, device)
        self.idx = torch.zeros(1, dtype=torch.int64, device=device)
        self.scratch = torch.zeros(1, device=device)

    def prepare(self, batch):
        super().prepare(batch)
        self.idx.fill_(1 << 40 if replay_step(batch) else 0)

    def forward(self):
        _store_at[(1,)](self.scratch, self.idx)
        return super().forward()


@triton.jit
def _spin(spin_ptr, flag_ptr):
    """When spin[0] != 0, wait for flag[0] to become non-zero (nobody ever sets it)."""
    if tl.load(spin_ptr) != 0:
        while tl.load(flag_ptr, volatile=True) == 0:
            pass


class HangsOnReplay(Safe):
    """On replay steps a kernel spins on a device flag that is never set: the replay never finishes."""

    def setup(self, spec, device):
        _require_cuda(self, device)
        super().setup(spec, device)
        self.spin = torch.zeros(1, dtype=torch.int32, device=device)
        self.flag = torch.zeros(1, dtype=torch.int32, device=device)

    def prepare(self, batch):
        super().prepare(batch)
        self.spin.fill_(1 if replay_step(batch) else 0)

    def forward(self):
        _spin[(1,)](self.spin, self.flag)
        return super().forward()


# -- breaks the contract --------------------------------------------------------------------
NoForward = torch_targets.NoForward  # not a Target subclass, and no forward()


class ForwardNotImplemented(graphsafe.Target):
    """A Target subclass that never overrides forward()."""

    support = graphsafe.Support.ALWAYS

    def setup(self, spec, device):
        pass

    def prepare(self, batch):
        pass


class SupportNever(Safe):
    """Declares that it must never be captured."""

    support = graphsafe.Support.NEVER


class SupportBogus(Safe):
    """support is a string."""

    support = "always"


class DefaultSpecDict(Safe):
    """default_spec is a dict, not a CaptureSpec."""

    default_spec = {"max_reqs": 4}


class ForwardReturnsInt(Safe):
    """forward() returns a Python int."""

    def forward(self):
        super().forward()
        return 3


class ForwardReturnsNothing(Safe):
    """forward() writes its output and returns None."""

    def forward(self):
        super().forward()


class StaticNotHeld(Safe):
    """static() returns a new tensor every call, one the target does not hold."""

    def static(self):
        return {"w": self.w, "scale": torch.ones(D, device=self.w.device)}


class StaticNotTensor(Safe):
    """static() holds a float."""

    def static(self):
        return {"w": self.w, "scale": 1.0}


class StaticNotDict(Safe):
    """static() returns a tensor, not a dict or list of tensors."""

    def static(self):
        return self.w


class ShortOutput(Safe):
    """forward() returns no rows, whatever the batch: the default live() cannot take the live tokens
    (even a one-token batch, which a derandomised CI run draws first)."""

    def forward(self):
        return super().forward()[:0]


class LiveReturnsInt(Safe):
    """live() returns an int."""

    def live(self, outputs, batch):
        return 0

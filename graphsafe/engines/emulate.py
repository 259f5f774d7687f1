"""The CPU emulator: records what a capture freezes and replays exactly that.

Capture runs ``forward()`` once under a :class:`~graphsafe.engines.recording.Recorder`
in emulate mode.  Replay re-executes only the recorded launches on the captured
tensors: in-place and ``out=`` ops run again on the same memory, functional ops
write their result into the tensor they produced at capture, view ops are not
re-run, Triton kernels relaunch with the grid, scalars, constexprs and
autotuned config frozen at capture.  None of ``forward()``'s Python runs again.

What it does not model: streams (everything is ordered), the caching
allocator's address reuse (a freed buffer keeps its old contents, which is
what a real graph reads only until the memory is reused), and memory shared
between graphs of one pool.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..contract import emulated_capture
from . import replay_clock, triton_env
from .base import Engine, Graph, as_outputs
from .recording import Recorder

__all__ = ["EmulatorEngine"]


class EmulatorEngine(Engine):
    name = "emulate"

    def __init__(self, device: str | torch.device = "cpu"):
        self._device = torch.device(device)
        triton_env.use_interpreter(force=self._device.type == "cpu")

    @property
    def device(self) -> torch.device:
        return self._device

    def warmup(self, fn: Callable[[], Any], *, skip_keys: set[int], known: set | None = None) -> Recorder:
        rec = Recorder("observe", learn_writes=True, skip_keys=skip_keys)
        rec.known_kernels = {kernel for kernel, _ in known or ()}
        with rec:
            fn()
        return rec

    def capture(self, fn: Callable[[], Any], *, pool: Any) -> Graph:
        rec = Recorder("emulate")
        with emulated_capture(), rec:
            out = fn()
            outs = as_outputs(out)
        program = list(rec.program)

        def replay() -> None:
            for step in program:
                step()
            replay_clock.replay_done()  # the emulator's replay is synchronous

        return Graph(outs, rec, replay, single=isinstance(out, torch.Tensor))

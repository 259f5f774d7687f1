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

On the CPU the Triton interpreter runs every kernel, and its own set-up per call was a
sixth of a check: :func:`fast_interpreter` removes that set-up's repeated work (the same
kernels compute the same values).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import torch

from ..contract import emulated_capture
from . import replay_clock, triton_env
from .base import Engine, Graph, as_outputs
from .host import HostMemory
from .recording import Recorder, opaque_enabled

__all__ = ["EmulatorEngine", "fast_interpreter"]


def fast_interpreter() -> bool:
    """Make Triton's interpreter cheaper per call without changing what it computes; True when installed.

    Every kernel launch, and every call of a ``@triton.jit`` helper inside a kernel (``tl.sum``,
    ``tl.max`` and the like are such helpers), re-patches ``triton.language`` with
    ``inspect.getmembers`` over each module and class, and each tensor op looks up its numpy dtype
    in a table built afresh on every call; integer ops also compute overflow checks whose
    result nothing reads (:func:`_no_unchecked_overflow_checks`).  On a check of the reference kernels the
    patching and the table are a large share of the time (``benchmarks/profile_check.py --engine emulate``
    shows it).  Here the names of each
    module's builtins are listed once (each call still patches exactly the attributes that hold a
    builtin at that moment, in the same order) and the dtype table is built once per dtype name.
    Installed only where the interpreter's source has the expected shape; otherwise nothing changes.
    """
    try:  # triton is imported on first use: TRITON_INTERPRET must be set before its first import
        import triton.language as tl
        from triton.runtime import interpreter as ti
    except Exception:  # pragma: no cover - no triton
        return False
    if getattr(ti, "_graphsafe_fast", False):
        return True
    try:
        patch_src = inspect.getsource(ti._patch_builtin)
        dtype_src = inspect.getsource(ti._get_np_dtype)
    except (AttributeError, OSError, TypeError):
        return False
    if (
        "inspect.getmembers(pkg)" not in patch_src
        or "_patch_attr(pkg, name, member," not in patch_src
        or "np_types" not in dtype_src
    ):
        return False
    is_builtin, patch_attr, get_np_dtype = tl.core.is_builtin, ti._patch_attr, ti._get_np_dtype
    names: dict[Any, tuple[str, ...]] = {}

    def _patch_builtin(pkg, *rest):
        known = names.get(pkg)
        if known is None:  # listed while unpatched: the first call patches from a clean module
            known = names[pkg] = tuple(n for n, m in inspect.getmembers(pkg) if is_builtin(m))
        for name in known:
            member = getattr(pkg, name, None)
            if is_builtin(member):  # already patched (a helper called inside a kernel): left as it is
                patch_attr(pkg, name, member, *rest)

    pointer, block = tl.pointer_type, tl.block_type
    by_name: dict[str, Any] = {}

    def _get_np_dtype(tt):
        el = tt.element_ty if isinstance(tt, block) else tt
        if isinstance(el, pointer):
            return get_np_dtype(el)
        np_dtype = by_name.get(el.name)
        if np_dtype is None:
            np_dtype = by_name[el.name] = get_np_dtype(el)
        return np_dtype

    ti._patch_builtin, ti._get_np_dtype = _patch_builtin, _get_np_dtype
    _no_unchecked_overflow_checks(ti)
    ti._graphsafe_fast = True
    return True


def _no_unchecked_overflow_checks(ti: Any) -> None:
    """Skip the interpreter's integer overflow checks where their result is thrown away.

    With ``sanitize_overflow`` on (the interpreter's default) every int32 add, sub and mul is
    computed again in int64 and compared with the type's bounds, and the result goes to
    ``device_assert``, which does nothing unless ``debug`` is on (off by default): work without
    effect, a few more interpreted ops per integer op.  Turned off only while ``debug`` is off and
    ``device_assert`` has that shape.
    """
    opts = getattr(ti.interpreter_builder, "options", None)
    try:
        assert_src = " ".join(inspect.getsource(type(ti.interpreter_semantic).device_assert).split())
    except (AttributeError, OSError, TypeError):
        return
    if (
        opts is None
        or getattr(opts, "debug", True)
        or not getattr(opts, "sanitize_overflow", False)
        or "if not self.builder.options.debug: return" not in assert_src
    ):
        return
    ti.interpreter_builder.options = dataclasses.replace(opts, sanitize_overflow=False)


class EmulatorEngine(Engine):
    name = "emulate"

    def __init__(self, device: str | torch.device = "cpu"):
        self._device = torch.device(device)
        if triton_env.use_interpreter(force=self._device.type == "cpu"):
            fast_interpreter()
        self.host = HostMemory(self._device)  # which tensors stand for host memory

    @property
    def device(self) -> torch.device:
        return self._device

    def host_memory(self) -> contextlib.AbstractContextManager:
        return self.host.watching()

    def warmup(
        self, fn: Callable[[], Any], *, skip_keys: set[int], known: set[tuple[str, frozenset[str]]] | None = None
    ) -> Recorder:
        rec = Recorder("observe", learn_writes=True, skip_keys=skip_keys)
        rec.known_kernels = set(known or ())
        with self.host.watching(), rec:
            fn()
        return rec

    def prescreen(self, fn: Callable[[], Any]) -> None:
        with self.host.watching():
            fn()

    def capture(self, fn: Callable[[], Any], *, pool: Any) -> Graph:
        """Run ``fn`` once under an emulate-mode recorder, refusing what a CUDA capture refuses
        (:mod:`~graphsafe.engines.capture_rules`, :mod:`~graphsafe.engines.host`)."""
        rec = Recorder("emulate", host=self.host)
        with emulated_capture(), self.host.watching(capturing=True), rec:
            out = fn()
            outs = as_outputs(out)
        program = list(rec.program)
        if not opaque_enabled():  # nothing else could see a kernel outside aten and Triton here
            rec.notes.append(
                "graph reader off on the emulator (it reads CUDA graphs) and GRAPHSAFE_OPAQUE=0: kernels outside "
                "aten and Triton are not seen"
            )

        def replay() -> None:
            for step in program:
                step()
            replay_clock.replay_done()  # the emulator's replay is synchronous

        return Graph(outs, rec, replay, single=isinstance(out, torch.Tensor))

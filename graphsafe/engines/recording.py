"""Record what a captured region launches: every aten op, every Triton kernel, every declared opaque call.

One :class:`Recorder` serves both engines.  During capture it sees each aten op
(``TorchDispatchMode``) and each Triton launch (a wrapper around the launcher's
``run``), and writes down what the capture freezes: tensor arguments by storage
(the pointer), and every host value (Python scalars, the evaluated grid,
constexprs, meta-parameters, autotuned configs).  The emulator also keeps what
it needs to re-execute those launches.

Kernels reached outside the dispatcher and Triton (an extension module called through TVM-FFI,
pybind11 or ctypes, as FlashInfer's wrappers call theirs) are invisible to both hooks.  Such a call
made through :func:`opaque_call` is recorded as one launch of kind ``"opaque"``: its tensor
arguments by storage, its other arguments as host values, the tensors it writes learned during
warm-up like a Triton kernel's; the emulator replays it with the arguments it was captured with.

The same recorder in *observe* mode watches an eager ``forward()`` so that the
frozen-host-value probe can diff the launches a batch needs against the ones
the graph froze; given ``overrides`` it runs Triton launches with host values put back to what
a capture froze (the frozen-host-value probe's control for a value that changes only rounding).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ..errors import CaptureError
from . import capture_rules
from .capture_rules import tensors_in as _tensors
from .hooks import RecorderMode, install_triton_hooks
from .hooks import active as _active
from .hooks import local as _local
from .host import HostMemory
from .launches import ExternalBuffer, Launch, Override, TensorArg, freeze
from .opaque import opaque_call, opaque_enabled
from .replay import ExternalRef, materialise
from .userframe import user_frame

__all__ = [
    "TensorArg",
    "Launch",
    "ExternalBuffer",
    "Recorder",
    "SYNC_OPS",
    "freeze",
    "active",
    "opaque_call",
    "opaque_enabled",
    "Override",
]


# aten ops that read device data back to the host (repeat_interleave: without output_size; the emulator's
# rules, per argument, are capture_rules.refusal).
SYNC_OPS = capture_rules.HOST_READS | {"aten::repeat_interleave"}
# Ops whose argument is a tensor torch just made from host data (torch.tensor, a Python scalar): the graph's own.
_LIFTS = {"aten::lift_fresh", "aten::lift_fresh_copy"}


def active() -> Recorder | None:
    """The recorder recording on this thread now, if any."""
    return cast("Recorder | None", _active())


def _syncs(func: Any, args: dict[str, Any]) -> bool:
    """Does this aten op read device data back to the host?  ``repeat_interleave`` only by counts in a tensor
    and without ``output_size`` (by an int, or given the output size, the host knows the shape)."""
    name = func._schema.name
    if name == "aten::repeat_interleave":
        return func._overloadname in ("Tensor", "self_Tensor") and args.get("output_size") is None
    return name in SYNC_OPS


# Factory ops whose result is uninitialised: a real graph does not touch the memory on replay.
_NO_REPLAY = {"aten::empty", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided", "aten::empty_like"}
# Bookkeeping ops that launch no device work (besides views): a difference in them is no branch.
_NO_DEVICE_WORK = _NO_REPLAY | {"aten::detach", "aten::alias", "aten::lift_fresh", "aten::set_", "aten::resize_"}


def _schema_writes(func) -> tuple[str, ...]:
    out = []
    for a in func._schema.arguments:
        if a.alias_info is not None and a.alias_info.is_write:
            out.append(a.name)
    return tuple(out)


class Recorder:
    """Context manager that records launches issued inside it.

    ``mode="capture"`` (default): keep weak references to external memory (CUDA
    engine).  ``mode="emulate"``: also keep a replayable program (emulator).
    ``mode="observe"``: just list launches (eager runs for diffs).
    ``learn_writes``: snapshot Triton pointer arguments around each launch to
    learn which ones each kernel writes (used once, during warm-up).
    ``yields``: recorders cannot nest, but one made with ``yields=True`` (graphsafe.guard's,
    around an engine's capture) lets another be entered inside it; it passes everything
    through meanwhile and finds the inner recorder in ``inner`` afterwards.
    ``overrides`` (observe mode only): :class:`Override` values Triton launches run with instead of
    their own; ``overridden`` counts the ones applied.
    ``host``: which tensors are host memory (:class:`~graphsafe.engines.host.HostMemory`; by default none
    is, whatever its device).  Ops on host memory only are no device work: not recorded as memory the graph
    reads, not replayed; in emulate mode every op is held to :func:`~graphsafe.engines.capture_rules.refusal`.
    """

    def __init__(
        self,
        mode: str = "capture",
        *,
        learn_writes: bool = False,
        skip_keys: set[int] | None = None,
        yields: bool = False,
        overrides: Sequence[Override] = (),
        host: HostMemory | None = None,
    ):
        assert mode in ("capture", "emulate", "observe")
        assert not overrides or mode == "observe", "graphsafe bug: overrides outside an observing recorder"
        self.mode = mode
        self.learn_writes = learn_writes
        self.skip_keys = skip_keys or set()
        # kernels whose writes are known already, not learned again: (name, the arguments that were tensors),
        # since one kernel specialised for other pointers (a None scratch buffer, say) writes other arguments
        self.known_kernels: set[tuple[str, frozenset[str]]] = set()
        self.launches: list[Launch] = []
        self.internal: set[int] = set()
        self.external: dict[int, ExternalBuffer] = {}
        self.program: list[Callable[[], None]] = []
        self.notes: list[str] = []
        self.kernel_writes: set[tuple[str, str]] = set()
        # kernels whose writes this recorder learned (some may write nothing seen), keyed as known_kernels
        self.learned_kernels: set[tuple[str, frozenset[str]]] = set()
        self.written: set[int] = set()  # storage keys written by recorded launches
        self.suspended = False
        self._keep: list[torch.Tensor] = []  # internal tensors the emulated graph owns
        self._mode: RecorderMode | None = None
        self.yields = yields
        self.inner: list[Recorder] = []  # recorders entered inside this one (yields=True)
        self._outer: tuple[Recorder, bool] | None = None  # (the yielding recorder, its suspended flag)
        self._overrides = {(o.kernel, o.occurrence, o.argument): o.value for o in overrides}
        self._occurrences: dict[str, int] = {}  # kernel -> launches seen (for overrides)
        self.overridden = 0
        self.host = host if host is not None else HostMemory(torch.device("cpu"))  # knows of no host memory

    # -- context -----------------------------------------------------------------
    def __enter__(self) -> Recorder:
        install_triton_hooks()
        outer = getattr(_local, "recorder", None)
        if outer is not None and not outer.yields:
            raise RuntimeError("graphsafe: recorders cannot nest")
        if outer is not None:  # the outer one passes every op through until this one exits
            self._outer = (outer, outer.suspended)
            outer.suspended = True
        _local.recorder = self
        self._mode = RecorderMode(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._mode is not None:
                self._mode.__exit__(*exc)
        finally:
            self._mode = None  # (it refers back to this recorder: without the cycle, refcounting frees both)
            _local.recorder = None
            if self._outer is not None:
                outer, was_suspended = self._outer
                outer.suspended = was_suspended
                outer.inner.append(self)
                _local.recorder, self._outer = outer, None
        if self.mode == "capture":
            self._keep.clear()  # a CUDA graph holds no references: only weak ones remain

    @contextlib.contextmanager
    def suspend(self):
        prev = self.suspended
        self.suspended = True
        try:
            yield
        finally:
            self.suspended = prev

    # -- tensors -----------------------------------------------------------------
    def _tensor_arg(self, t: torch.Tensor, where: str, kernel: str, register: bool = True) -> TensorArg:
        s = t.untyped_storage()
        key = s.data_ptr()
        internal = key in self.internal
        # a 0-dim host tensor a device op takes is a scalar frozen at capture, not memory the graph reads
        register = register and self.mode != "observe" and not (t.dim() == 0 and self.host.is_host(t))
        if not internal and key not in self.external and key != 0 and register:
            self.external[key] = ExternalBuffer.of(t, key, where, strong=self.mode == "emulate")
        if not internal and key in self.external and kernel not in self.external[key].kernels:
            self.external[key].kernels.append(kernel)
        return TensorArg(key, str(t.dtype), tuple(t.shape), tuple(t.stride()), int(t.storage_offset()), internal)

    def _template(self, v: Any) -> Any:
        """Emulator: replace tensors on external memory by re-materialisable references."""
        if isinstance(v, torch.Tensor):
            key = v.untyped_storage().data_ptr()
            if v.dim() == 0 and self.host.is_host(v) and not self.host.pinned(v):
                return v.clone()  # a host scalar: its value at capture
            if key in self.external:
                handle = self.external[key].handle
                return ExternalRef(handle, v.dtype, v.storage_offset(), tuple(v.shape), tuple(v.stride()), v.device)
            self._keep.append(v)
            return v
        if isinstance(v, (list, tuple)):
            return type(v)(self._template(x) for x in v) if not hasattr(v, "_fields") else v
        return v

    # -- aten --------------------------------------------------------------------
    def _on_aten(self, func, args, kwargs):
        name = func._schema.name
        where = user_frame(2)
        schema_args = func._schema.arguments
        flat_args: dict[str, Any] = {}
        for i, a in enumerate(args):
            flat_args[schema_args[i].name if i < len(schema_args) else f"arg{i}"] = a
        flat_args.update(kwargs)
        host_only = self.mode != "observe" and self._capturable(func, name, flat_args, where)
        # inputs first (registers memory the graph did not allocate), then the op, then outputs
        rec_args = {aname: self._record_value(a, where, name, not host_only) for aname, a in flat_args.items()}
        in_keys = {t.untyped_storage().data_ptr() for a in flat_args.values() for t in _tensors(a)}
        if self.mode == "emulate":
            tmpl_args = self._template(tuple(args))
            tmpl_kwargs = {k: self._template(v) for k, v in kwargs.items()}
        out = func(*args, **kwargs)
        # storages first seen as outputs (not aliasing an input) were allocated by the graph
        for t in _tensors(out):
            k = t.untyped_storage().data_ptr()
            if k not in in_keys and k not in self.external:
                self.internal.add(k)
            if host_only:
                self.host.mark(t)
        writes = _schema_writes(func)
        if self.mode != "observe":
            for w in writes:
                for t in _tensors(flat_args.get(w)):
                    self.written.add(t.untyped_storage().data_ptr())
        self.launches.append(
            Launch(
                "aten", name, rec_args, None, where, writes, device_work=not (func.is_view or name in _NO_DEVICE_WORK)
            )
        )
        if self.mode == "emulate" and not host_only:  # host work ran once, at capture, as on a GPU
            self._program_aten(func, name, tmpl_args, tmpl_kwargs, out, writes)
        return out

    def _capturable(self, func, name: str, args: dict[str, Any], where: str) -> bool:
        """Raise :class:`CaptureError` where a CUDA capture refuses the op; True when it is host work only."""
        tensors = [t for a in args.values() for t in _tensors(a)]
        host_only = bool(tensors) and all(self.host.is_host(t) for t in tensors)
        if name in _LIFTS:  # torch.tensor(...) or a Python scalar made inside forward(): the graph's own
            self.internal.add(tensors[0].untyped_storage().data_ptr())
            self.host.mark(tensors[0], wrapped=True)  # (unless torch.tensor's watch marks it first)
        if self.mode == "emulate":
            why = capture_rules.refusal(func, args, self.host)
        elif (
            _syncs(func, args)
            and not host_only
            and any(t.untyped_storage().data_ptr() in self.internal for t in tensors)
        ):
            why = capture_rules.SYNC
        else:
            why = None
        if why is not None:
            raise CaptureError(why.format(op=name.replace("aten::", ""), where=where), where=where)
        if host_only and name in capture_rules.HOST_READS:
            self.notes.append(
                f"host read of a host tensor during capture ({name.replace('aten::', '')} at {where}): "
                "its value is frozen into the graph"
            )
        return host_only

    def _record_value(self, a: Any, where: str, kernel: str, register: bool = True) -> Any:
        if isinstance(a, torch.Tensor):
            return self._tensor_arg(a, where, kernel, register)
        if isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
            return tuple(self._record_value(x, where, kernel, register) for x in a)
        return freeze(a)

    def _program_aten(self, func, name, targs, tkwargs, out, writes) -> None:
        if func.is_view or name in _NO_REPLAY:
            return
        if writes:
            self.program.append(lambda: func(*materialise(targs), **materialise(tkwargs)))
            return
        outs = [t for t in _tensors(out)]
        if not outs:
            return
        keep = [self._template(t) for t in outs]

        def rerun():
            res = func(*materialise(targs), **materialise(tkwargs))
            for dst, src in zip(materialise(keep), _tensors(res)):
                dst.copy_(src)

        self.program.append(rerun)

    # -- triton ------------------------------------------------------------------
    def _on_triton(self, kernel, orig_run, args, kwargs, grid):
        fn = getattr(kernel, "fn", kernel)
        name = getattr(fn, "__name__", repr(kernel))
        where = user_frame(2)
        names = list(getattr(kernel, "arg_names", []))
        if self._overrides:
            args, kwargs, grid = self._override(name, names, args, kwargs, grid)
        bound: dict[str, Any] = dict(zip(names, args))
        bound.update(kwargs)
        g = grid
        if callable(grid):
            try:
                g = grid(dict(bound))
            except Exception:
                g = grid
        frozen_grid = tuple(int(x) for x in g) if isinstance(g, (tuple, list)) else None
        rec_args = {k: self._record_value(v, where, name) for k, v in bound.items()}
        launch = Launch("triton", name, rec_args, frozen_grid, where)
        self.launches.append(launch)
        ptrs = {k: v for k, v in bound.items() if isinstance(v, torch.Tensor)}
        before = None
        if self.learn_writes and (learn := (name, frozenset(ptrs))) not in self.known_kernels:
            self.learned_kernels.add(learn)
            before = {k: v.clone() for k, v in ptrs.items() if v.untyped_storage().data_ptr() not in self.skip_keys}
        with self.suspend():
            result = orig_run(kernel, *args, grid=g if frozen_grid else grid, warmup=False, **kwargs)
        if before is not None:
            for k, old in before.items():
                if not _same_bytes(old, ptrs[k]):
                    self.kernel_writes.add((name, k))
        if self.mode == "emulate":
            targs = self._template(tuple(args))
            tkwargs = {k: self._template(v) for k, v in kwargs.items()}
            fg = frozen_grid if frozen_grid is not None else grid

            def relaunch():
                with _suspended_global():
                    orig_run(kernel, *materialise(targs), grid=fg, warmup=False, **materialise(tkwargs))

            self.program.append(relaunch)
        return result

    def _override(self, name: str, names: list[str], args: tuple, kwargs: dict, grid: Any) -> tuple:
        """``(args, kwargs, grid)`` of this launch of ``name`` with the overrides for it applied."""
        occ = self._occurrences.get(name, 0)
        self._occurrences[name] = occ + 1
        ov = {a: v for (k, o, a), v in self._overrides.items() if k == name and o == occ}
        if not ov:
            return args, kwargs, grid
        self.overridden += len(ov)
        args = tuple(ov.get(names[i], a) if i < len(names) else a for i, a in enumerate(args))
        kwargs = {k: ov.get(k, v) for k, v in kwargs.items()}
        return args, kwargs, ov.get("grid", grid)

    # -- opaque calls --------------------------------------------------------------------
    def _on_opaque(
        self, name: str, fn: Callable, args: tuple, kwargs: dict, arg_names: tuple, host_values: dict
    ) -> Any:
        where = user_frame(2)
        bound: dict[str, Any] = {}
        for i, a in enumerate(args):
            label = arg_names[i] if i < len(arg_names) else f"arg{i}"
            if label is not None:
                bound[label] = a
        bound.update(kwargs)
        rec_args = {k: self._record_value(v, where, name) for k, v in bound.items()}
        rec_args.update({k: freeze(v) for k, v in host_values.items()})
        self.launches.append(Launch("opaque", name, rec_args, None, where))
        tensors = {k: list(_tensors(v)) for k, v in bound.items()}
        before = None
        if (
            self.learn_writes
            and (learn := (name, frozenset(k for k, ts in tensors.items() if ts))) not in self.known_kernels
        ):
            self.learned_kernels.add(learn)
            before = {
                k: [t.clone() for t in ts]
                for k, ts in tensors.items()
                if ts and all(t.untyped_storage().data_ptr() not in self.skip_keys for t in ts)
            }
        # no dispatch mode at all while it runs: torch.compile'd code (an opaque call may be one) falls back to
        # eager, or fails, under an active TorchDispatchMode
        with self.suspend(), _disable_current_modes():
            result = fn(*args, **kwargs)
        if before is not None:
            for k, olds in before.items():
                if any(not _same_bytes(old, t) for old, t in zip(olds, tensors[k])):
                    self.kernel_writes.add((name, k))
        in_keys = {t.untyped_storage().data_ptr() for ts in tensors.values() for t in ts}
        made = [t for t in _tensors(result) if t.untyped_storage().data_ptr() not in in_keys | set(self.external)]
        self.internal.update(t.untyped_storage().data_ptr() for t in made)  # the call allocated them: the graph's
        if self.mode == "emulate":
            targs = self._template(tuple(args))
            tkwargs = {k: self._template(v) for k, v in kwargs.items()}
            keep = [self._template(t) for t in made]

            def relaunch():
                with _suspended_global(), _disable_current_modes():
                    res = fn(*materialise(targs), **materialise(tkwargs))
                fresh = [t for t in _tensors(res) if t.untyped_storage().data_ptr() not in in_keys]
                for dst, src in zip(materialise(keep), fresh):  # later launches read the captured result
                    dst.copy_(src)

            self.program.append(relaunch)
        return result


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN equals NaN with the same bits)."""
    return bool(torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8)))


@contextlib.contextmanager
def _suspended_global():
    rec = getattr(_local, "recorder", None)
    if rec is None:
        yield
        return
    with rec.suspend():
        yield

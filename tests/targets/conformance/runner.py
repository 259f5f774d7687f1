"""Capture one conformance case, replay it for new inputs, and say what happened.

Three ways to capture (``how``):

* ``cuda``: a real ``torch.cuda.graph`` with nothing of graphsafe in between: two eager warm-up calls on
  a side stream, then the capture (CUDA's own verdict);
* ``cuda-engine`` and ``emulate``: graphsafe's capture session on its CUDA engine or its CPU emulator
  (warm-up, pre-screen, capture, what the recorder refuses), then the stale-pointer check before each
  replay.

The verdict: ``capture-failure`` (the error's class and first line), ``replays`` (every replay for a new
batch equals a fresh eager instance's output, or for random cases draws anew and validly), ``stale``
(and what differs), ``error`` (the case itself failed outside the capture) or ``unavailable`` (this
machine lacks what the case needs).  Nothing here touches CUDA unless ``how`` asks for it.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import torch

from .case import SPEC, Case, batch

__all__ = ["run", "HOWS", "CAPTURE_SEED", "SEEDS", "compare", "root_cause"]

HOWS = ("cuda", "cuda-engine", "emulate")
CAPTURE_SEED, SEEDS = 0, (1, 2, 3)


class _Verdict(Exception):
    def __init__(self, verdict: dict):
        super().__init__(verdict["verdict"])
        self.verdict = verdict


def root_cause(exc: BaseException) -> BaseException:
    """The first exception of a chain: a failed capture's own error, not ``capture_end``'s complaint."""
    seen = {id(exc)}
    while True:
        nxt = exc.__cause__ or exc.__context__
        if nxt is None or id(nxt) in seen:
            return exc
        seen.add(id(nxt))
        exc = nxt


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else "")[:240]


def _failure(verdict: str, exc: BaseException, stage: str) -> dict:
    root = root_cause(exc)
    out = {"verdict": verdict, "stage": stage, "error": type(exc).__name__, "message": _first_line(exc)}
    if root is not exc:
        out["root_error"], out["root_message"] = type(root).__name__, _first_line(root)
    return out


def _as_tuple(out: Any) -> tuple[torch.Tensor, ...]:
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


class _RawGraph:
    """A real torch.cuda.graph around ``forward()``: CUDA's verdict, no graphsafe code in the capture."""

    def __init__(self, case: Case):
        dev = torch.device("cuda", torch.cuda.current_device())
        self.target = case.cls()
        try:
            self.target.setup(SPEC, dev)
            self.target.prepare(batch(CAPTURE_SEED))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.target.forward()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
        except Exception as e:
            raise _Verdict(_failure("error", e, "eager")) from e
        self.graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.current_stream()
        try:
            with torch.cuda.graph(self.graph):
                out = self.target.forward()
            torch.cuda.synchronize()
        except Exception as e:
            torch.cuda.set_stream(stream)  # a capture_end that raised left the capture stream current
            raise _Verdict(_failure("capture-failure", e, "capture")) from e
        self.outputs = _as_tuple(out)
        self.device = dev

    def freed(self) -> list[str]:
        return []

    def replay(self) -> None:
        self.graph.replay()
        torch.cuda.synchronize()


class _Session:
    """graphsafe's capture session on one of its engines, as a check captures."""

    def __init__(self, case: Case, engine):
        from graphsafe.capture.session import CaptureSession
        from graphsafe.errors import TargetRaised

        self.engine = engine
        try:
            self.session = CaptureSession(case.cls, SPEC, engine, (1,), capture_batch=batch(CAPTURE_SEED))
        except TargetRaised as e:
            raise _Verdict({**_failure("error", e, e.method), "error": e.exc_type}) from e
        if self.session.capture_error is not None:
            raise _Verdict(_failure("capture-failure", self.session.capture_error.error, "capture"))
        self.graph = self.session.graphs[1]
        self.target = self.session.target
        self.outputs = self.graph.outputs
        self.device = engine.device

    def freed(self) -> list[str]:
        dead = self.graph.dead_inputs()
        paths = self.session.infos[1].paths
        return [", ".join(paths.get(b.key, [])) or f"<tensor first used at {b.first_use}>" for b in dead]

    def replay(self) -> None:
        self.graph.replay()
        self.engine.synchronize()


def _capture(case: Case, how: str, engine=None):
    if how == "cuda":
        return _RawGraph(case)
    if engine is None:
        from graphsafe.engines import get_engine

        engine = get_engine("cuda" if how == "cuda-engine" else "emulate")
    return _Session(case, engine)


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    if dtype in (torch.float16, torch.bfloat16) or dtype.itemsize == 1 and dtype.is_floating_point:
        return 1e-2, 1e-2
    return 1e-4, 1e-5  # atomics on a GPU add in any order


def compare(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> str | None:
    """None when every output matches; else what differs, output by output."""
    if len(got) != len(want):
        return f"{len(got)} outputs, eager returned {len(want)}"
    parts = []
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            parts.append(f"output {i}: shape {tuple(g.shape)}, eager {tuple(w.shape)}")
            continue
        g, w = g.detach().cpu(), w.detach().cpu()
        if g.dtype.is_floating_point:
            rtol, atol = _tolerance(g.dtype)
            gf, wf = g.float(), w.float()
            bad = ~torch.isclose(gf, wf, rtol=rtol, atol=atol, equal_nan=True)
            if bad.any():
                err = (gf - wf).abs()[bad & torch.isfinite(gf - wf)]
                worst = f", max abs {err.max().item():.3g}" if err.numel() else ""
                parts.append(f"output {i}: {int(bad.sum())} of {g.numel()} values differ{worst}")
        elif not torch.equal(g, w):
            parts.append(f"output {i}: {int((g != w).sum())} of {g.numel()} values differ")
    return "; ".join(parts) or None


def _clone(outs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(t.detach().clone() for t in outs)


def _rounds(case: Case, cap) -> dict:
    ref = case.cls()
    ref.setup(SPEC, cap.device)
    freed: list[str] = []
    problems: list[str] = []
    fresh_rounds = 0
    for seed in SEEDS:
        b = batch(seed)
        cap.target.prepare(b)
        freed += [p for p in cap.freed() if p not in freed]
        cap.replay()
        first = _clone(cap.outputs)
        ref.prepare(b)
        want = _as_tuple(ref.forward())
        if case.check == "fresh":
            cap.replay()
            second = _clone(cap.outputs)
            if not (case.valid(first, cap.target) and case.valid(second, cap.target)):
                problems.append(f"batch {seed}: a replay drew values out of range")
            elif compare(first, second) is not None:
                fresh_rounds += 1
            if not case.valid(want, ref):
                raise _Verdict({"verdict": "error", "stage": "eager", "message": "eager drew values out of range"})
        else:
            diff = compare(first, want)
            if diff:
                problems.append(f"batch {seed}: {diff}")
    if case.check == "fresh" and fresh_rounds == 0:
        problems.append("every replay drew the same values")
    out: dict[str, Any] = {"verdict": "stale" if problems or freed else "replays"}
    if problems:
        out["differs"] = problems[0] + (f" (and {len(problems) - 1} more batches)" if len(problems) > 1 else "")
    if freed:
        out["freed"] = freed
    return out


def run(case: Case, how: str, engine=None) -> dict:
    """Capture ``case`` the ``how`` way (``engine``: an engine to use instead of a new one) and replay it."""
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    t0 = time.perf_counter()
    why = case.unavailable()
    if why:
        return {"verdict": "unavailable", "why": why}
    try:
        cap = _capture(case, how, engine)
        try:
            verdict = _rounds(case, cap)
        except _Verdict:
            raise
        except Exception as e:
            raise _Verdict({**_failure("error", e, "replay"), "traceback": traceback.format_exc(limit=-4)}) from e
    except _Verdict as v:
        verdict = v.verdict
    verdict["seconds"] = round(time.perf_counter() - t0, 3)
    return verdict

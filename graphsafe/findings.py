"""What a check reports: finding kinds, findings and the check result."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field
from typing import Any

from .contract import Batch, CaptureSpec

__all__ = ["FindingKind", "KindInfo", "KINDS", "Finding", "Mismatch", "CheckResult", "FindingError"]


class FindingKind(str, enum.Enum):
    """The hazards graphsafe detects; values are the kebab-case names used everywhere."""

    CAPTURE_FAILURE = "capture-failure"
    STALE_POINTER = "stale-pointer"
    UNPERSISTED_METADATA = "unpersisted-metadata"
    LAZY_INIT = "lazy-init"
    FROZEN_HOST_VALUE = "frozen-host-value"
    STALE_PADDING = "stale-padding"
    OUTPUT_NOT_WRITTEN = "output-not-written"
    NONDETERMINISTIC_REPLAY = "nondeterministic-replay"
    SUPPORT_MISMATCH = "support-mismatch"
    REPLAY_MISMATCH = "replay-mismatch"
    TARGET_ERROR = "target-error"

    def __str__(self) -> str:  # "stale-pointer", not "FindingKind.STALE_POINTER"
        return self.value


@dataclass(frozen=True)
class KindInfo:
    """What graphsafe knows of one finding kind: the one home of these facts (a new kind is one entry here and,
    when a probe makes it, one module in ``graphsafe/diagnosis/probes/``)."""

    explanation: str  # what the hazard is, for reports
    fix: str  # what to do about it
    stage: str  # when it is found: "capture", "step" (every step, before the replay), "diagnosis" (a step that
    # differed), "any" (the target's own error), "audit"
    probe: str  # the module of graphsafe.diagnosis.probes that makes it ("" for none)
    precedence: int  # lower is more specific: the kind that a group of findings of one cause reports
    symptom: bool  # names no cause of its own, only an output: joins a finding that names one
    ruled_out: str = ""  # for a step probe that saw nothing: what a replay-mismatch's "ruled out" says of it
    #: its probe decides from recordings, ledgers and eager runs alone, never replaying the graph: it runs for a step
    #: whose replay faults or never ends (in a fresh process, :mod:`graphsafe.diagnosis.unreplayable`)
    without_replay: bool = False


#: every finding kind, in the order their probes run within a stage
KINDS: dict[FindingKind, KindInfo] = {
    FindingKind.CAPTURE_FAILURE: KindInfo(
        explanation="forward() cannot be captured: it synchronises with the host (.item(), .tolist(), nonzero, a blocking copy) or raises during capture. A CUDA graph records device work only, so any host read of device data inside forward() fails the capture or leaves the CUDA context broken.",
        fix="Move host reads into prepare(); keep forward() free of .item()/.tolist()/nonzero.",
        stage="capture",
        probe="capture_failure",
        precedence=0,
        symptom=False,
    ),
    FindingKind.STALE_POINTER: KindInfo(
        explanation="The graph reads a tensor that was freed after capture. The graph keeps the old address; once the caching allocator hands that memory to another tensor, replays read someone else's data.",
        fix="Allocate the buffer once in setup() for the spec's maximum and copy_() each step's values into it.",
        stage="step",
        probe="stale_pointer",
        precedence=1,
        symptom=False,
        without_replay=True,
        ruled_out="every buffer the graph reads is still alive",
    ),
    FindingKind.NONDETERMINISTIC_REPLAY: KindInfo(
        explanation="Two replays of the same prepared batch give different outputs (races, atomics, uninitialised reads).",
        fix="Remove races and order-dependent atomics, or zero scratch before use.",
        stage="step",
        probe="nondeterministic_replay",
        precedence=5,
        symptom=False,
        ruled_out="two replays of this example's first step agreed bitwise",
    ),
    FindingKind.LAZY_INIT: KindInfo(
        explanation="The graph reads a buffer written only during warm-up (a planning kernel behind a have-initialized flag). Capture skipped the kernel, so replays keep the warm-up result forever.",
        fix="Use separate warm-up and captured state (graphsafe.capturing()), or run the planning kernel every step inside forward(), so capture records it.",
        stage="diagnosis",
        probe="lazy_init",
        precedence=2,
        symptom=False,
        without_replay=True,
    ),
    FindingKind.UNPERSISTED_METADATA: KindInfo(
        explanation="The graph reads a buffer that prepare() no longer writes: this step's metadata went into a new tensor or another attribute, so every replay sees the capture's (or an older step's) metadata.",
        fix="Keep one persistent buffer per metadata tensor, sized for the spec's maximum, and copy_() into it in prepare() instead of rebinding the attribute.",
        stage="diagnosis",
        probe="unpersisted_metadata",
        precedence=4,
        symptom=False,
        without_replay=True,
    ),
    FindingKind.FROZEN_HOST_VALUE: KindInfo(
        explanation="A host value (kernel scalar, grid, tensor shape or Python branch) was computed from the capture batch and frozen into the graph; this batch needs a different value.",
        fix="Derive host values from the worst case of the capture spec (max_seq_len, max_reqs) and read per-request values on the device.",
        stage="diagnosis",
        probe="frozen_host_value",
        precedence=3,
        symptom=False,
        without_replay=True,
    ),
    FindingKind.OUTPUT_NOT_WRITTEN: KindInfo(
        explanation="The replay leaves some live output positions unwritten: they keep whatever the buffer held before.",
        fix="Make forward() write every live output position on every call.",
        stage="diagnosis",
        probe="output_not_written",
        precedence=8,
        symptom=True,
    ),
    FindingKind.STALE_PADDING: KindInfo(
        explanation="Live rows or persistent state depend on padded request slots: padding left over from an earlier, larger batch, or padded slots (seq_len 0) that produce NaN and leak through a batch-wide reduction.",
        fix="Zero (or set to a harmless value) every padded slot and every tail past this batch in prepare(); mask padded rows out of batch-wide reductions.",
        stage="diagnosis",
        probe="stale_padding",
        precedence=6,
        symptom=False,
    ),
    FindingKind.TARGET_ERROR: KindInfo(
        explanation="The target raised in setup(), prepare() or forward() outside capture, or broke the contract.",
        fix="Fix the error shown; the checker cannot run a target that raises eagerly.",
        stage="any",
        probe="",
        precedence=7,
        symptom=False,
    ),
    FindingKind.REPLAY_MISMATCH: KindInfo(
        explanation="The replay differs from the eager run and no probe could attribute the difference to a known hazard.",
        fix="Inspect the report's mismatching positions; rerun with more steps.",
        stage="diagnosis",
        probe="",
        precedence=9,
        symptom=True,
    ),
    FindingKind.SUPPORT_MISMATCH: KindInfo(
        explanation="The declared Support level does not match what the backend can serve from one graph.",
        fix="Declare the highest Support level that passes.",
        stage="audit",
        probe="",
        precedence=10,
        symptom=False,
    ),
}
EXPLANATIONS: dict[FindingKind, str] = {k: v.explanation for k, v in KINDS.items()}
FIXES: dict[FindingKind, str] = {k: v.fix for k, v in KINDS.items()}


@dataclass
class Mismatch:
    """Where graph and eager disagree in one tensor."""

    tensor: str
    count: int
    total: int
    max_abs: float
    max_rel: float
    first: list[dict[str, Any]] = field(default_factory=list)  # {index, request, token, graph, eager}

    def to_dict(self) -> dict:
        return dict(
            tensor=self.tensor,
            count=self.count,
            total=self.total,
            max_abs=self.max_abs,
            max_rel=self.max_rel,
            first=list(self.first),
        )


@dataclass
class Finding:
    """One hazard found in one target."""

    kind: FindingKind
    message: str
    target: str = ""
    where: str = ""
    probe: str = ""
    engine: str = ""
    spec: CaptureSpec | None = None
    capture_size: int = 0
    capture_batch: Batch | None = None
    batches: list[Batch] = field(default_factory=list)
    step: int = -1
    mismatches: list[Mismatch] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    severity: str = "error"
    examples_to_find: int = 0
    seconds_to_find: float = 0.0
    heatmap: dict[str, Any] | None = None
    report_dir: str = ""
    #: what is at fault, as ``"buffer:<path>"``, ``"argument:<kernel>.<arg>"``, ``"branch:<line>"``,
    #: ``"line:<file:line>"`` or ``"output:<tensor>"`` (only a symptom); findings of one cause are one bug
    cause: str = ""

    def __post_init__(self) -> None:
        if not self.cause:
            self.cause = f"{self.kind.value}:{self.where}"

    @property
    def key(self) -> tuple[str, str, str]:
        """Identity for deduplication: the same (target, kind, where) is one finding."""
        return (self.target, self.kind.value, self.where)

    @property
    def short_hash(self) -> str:
        return hashlib.sha1("\0".join(self.key).encode()).hexdigest()[:8]

    @property
    def explanation(self) -> str:
        return EXPLANATIONS[self.kind]

    @property
    def fix(self) -> str:
        return FIXES[self.kind]

    @property
    def max_abs(self) -> float:
        return max((m.max_abs for m in self.mismatches), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((m.max_rel for m in self.mismatches), default=0.0)

    def summary(self) -> str:
        """Multi-line text for test failures and the command line."""
        lines = [f"{self.kind.value}: {self.message}"]
        if self.where:
            lines.append(f"  at: {self.where}")
        if self.capture_batch is not None:
            lines.append(f"  captured with: {self.capture_batch.short()} (size {self.capture_size})")
        for i, b in enumerate(self.batches):
            mark = "  <- fails" if i == self.step else ""
            lines.append(f"  step {i}: {b.short()}{mark}")
        for m in self.mismatches[:3]:
            lines.append(
                f"  {m.tensor}: {m.count}/{m.total} mismatched, max abs {m.max_abs:.3g}, max rel {m.max_rel:.3g}"
            )
        if self.error:
            lines.append("  error: " + self.error.strip().splitlines()[-1])
        if self.report_dir:
            lines.append(f"  report: {self.report_dir}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


class FindingError(AssertionError):
    """Raised inside a Hypothesis example so that it shrinks towards the finding (None: a difference whose
    finding is decided once shrinking has ended)."""

    def __init__(self, finding: Finding | None):
        super().__init__(finding.summary() if finding is not None else "graph and eager differ (not yet diagnosed)")
        self.finding = finding


@dataclass
class CheckResult:
    """The outcome of :func:`graphsafe.check` for one target."""

    target: str
    engine: str
    spec: CaptureSpec
    probes: tuple[str, ...]
    support: str = ""  # the Support level the target was checked at
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    examples: int = 0  # examples drawn before the first finding, or all of them when none
    calls: int = 0  # example runs in all, Hypothesis' shrinking included
    steps: int = 0
    seconds: float = 0.0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        """True when no error-severity finding was made (info findings do not count)."""
        return not self.errors

    @property
    def kinds(self) -> set[str]:
        return {f.kind.value for f in self.errors}

    def __bool__(self) -> bool:
        return self.ok

    @property
    def header(self) -> str:
        """What was checked: target, engine, support level and spec."""
        spec = self.spec
        sizes = ", ".join(map(str, spec.default_capture_sizes())) if spec is not None else "?"
        shape = (
            (
                f"max_reqs={spec.max_reqs}, max_query_len={spec.max_query_len}, max_seq_len={spec.max_seq_len}, "
                f"block_size={spec.block_size}, capture sizes {sizes}"
            )
            if spec is not None
            else "no spec"
        )
        return f"{self.target} on {self.engine} at Support.{self.support or '?'} ({shape})"

    def summary(self) -> str:
        head = (
            f"{self.target} on {self.engine}: "
            + ("ok" if self.ok else ", ".join(sorted(self.kinds)))
            + f" ({self.examples} examples, {self.steps} steps, {self.seconds:.1f}s)"
        )
        return "\n".join([head] + [f.summary() for f in self.findings])

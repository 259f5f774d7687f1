"""The subjects of the mutation benchmark and what their buffers are.

Subjects are graphsafe's safe targets: the fixed reference variants, the FlashInfer targets and the vLLM
targets, the last two on their CPU stand-ins (``library = "standin"``, the test suite's small classes) unless
asked for the real library.  A subject's :class:`Profile` lists its buffers by attribute path (the steps
that reach them, so an operator can read and rebind one on any instance), found generically: every tensor
reachable from an instance right after ``setup()`` by a path that still reaches it after capture and
``prepare()`` (:mod:`graphsafe.capture.statewalk`), which of them ``prepare()`` writes
(:func:`graphsafe.capture.ledger.prepare_writes`), which the captured graph reads (the capture's recording)
and which are static (``static()``).  Nothing here is graphsafe's diagnosis.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from graphsafe.capture.ledger import prepare_writes, storages_of
from graphsafe.capture.policies import POLICIES
from graphsafe.capture.statewalk import paths_by_storage, storage_key, walk_steps
from graphsafe.capture.statics import static_keys
from graphsafe.contract import CAPTURE_SEED, Batch, CaptureSpec, Support, Target, capture_prepare

__all__ = [
    "SUBJECTS",
    "subject_class",
    "registered_variants",
    "spec_of",
    "support_of",
    "Buffer",
    "Profile",
    "profile",
    "draw_batch",
    "resolve_steps",
]

#: subject name -> group; the classes are resolved on first use (the stand-ins import their modules then)
SUBJECTS: dict[str, str] = {  # the groups interleaved: a campaign cut short has covered each
    "mla_indexer": "reference",
    "flashinfer:decode": "flashinfer",
    "vllm:TRITON_ATTN": "vllm",
    "flex": "reference",
    "flashinfer:prefill": "flashinfer",
    "vllm:TRITON_MLA": "vllm",
    "flashmla_lazy": "reference",
    "flashinfer:mla": "flashinfer",
    "vllm:FLEX_ATTENTION": "vllm",
    "flashmla_fp8": "reference",
    "flashinfer:decode:tensor_cores": "flashinfer",
    "triton_mla": "reference",
}


def subject_class(name: str, library: str = "standin") -> type:
    """The class of subject ``name``; FlashInfer and vLLM subjects on the stand-in unless ``library`` is "real"."""
    group = SUBJECTS[name]
    if group == "reference":
        from graphsafe import reference

        return reference.resolve(name)
    if library == "real":
        if group == "flashinfer":
            from graphsafe import flashinfer

            return flashinfer.resolve(name)
        from graphsafe import vllm

        return vllm.resolve(name)
    if group == "flashinfer":
        from tests.targets.flashinfer_standin import STANDIN
    else:
        from tests.targets.vllm_standin import STANDIN
    return STANDIN[name]


def registered_variants(library: str = "standin") -> list[tuple[str, type, str | None]]:
    """``(name, class, expected kind or None)`` of every registered target of the subjects' groups, safe and
    buggy: what the ground truth is validated on."""
    from graphsafe import reference

    out = [(n, reference.resolve(n), getattr(reference.resolve(n), "expected", None)) for n in reference.names()]
    if library == "real":
        from graphsafe import flashinfer, vllm

        classes = {n: flashinfer.resolve(n) for n in flashinfer.names()} | {n: vllm.resolve(n) for n in vllm.names()}
    else:
        from tests.targets.flashinfer_standin import STANDIN as FI
        from tests.targets.vllm_standin import STANDIN as VL

        classes = {**FI, **VL}
    return out + [(n, c, getattr(c, "expected", None)) for n, c in classes.items()]


def spec_of(cls: type) -> CaptureSpec:
    return getattr(cls, "default_spec", None) or CaptureSpec()


def support_of(cls: type) -> Support:
    return Support(getattr(cls, "support", Target.support))


Step = tuple[bool, Any]


def resolve_steps(root: Any, steps: tuple[Step, ...]) -> tuple[Any, Step]:
    """The object holding the buffer that ``steps`` lead to from ``root``, and the last step."""
    obj = root
    for item, key in steps[:-1]:
        obj = obj[key] if item else getattr(obj, key)
    return obj, steps[-1]


@dataclass
class Buffer:
    """One persistent tensor of a subject: its path, the steps to it, and what it is to the graph."""

    path: str
    steps: list[list[Any]]  # [[is_item, key], ...]
    shape: list[int]
    dtype: str
    whole: bool  # the tensor covers its whole storage
    shared: bool  # another path reaches the same storage
    rebindable: bool  # the last step is an attribute or a dict/list item
    rows: str = ""  # what dim 0 counts: "reqs", "reqs+1", "tokens", "tokens+1" or "" (none of them)

    @property
    def step_tuple(self) -> tuple[Step, ...]:
        return tuple((bool(i), k) for i, k in self.steps)


@dataclass
class Profile:
    """A subject's buffers that the graph reads and ``prepare()`` writes (``written``), and the tensors the
    graph never reads (``unread``), each as a :class:`Buffer`."""

    subject: str
    written: list[Buffer] = field(default_factory=list)
    unread: list[Buffer] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Profile:
        return cls(d["subject"], [Buffer(**b) for b in d["written"]], [Buffer(**b) for b in d["unread"]])


def _rows(n: int, spec: CaptureSpec, extra: int) -> str:
    tokens = spec.max_reqs * spec.max_query_len
    for label, size in (("reqs", spec.max_reqs + extra), ("tokens", tokens), ("reqs+1", spec.max_reqs + extra + 1)):
        if n == size:
            return label
    return "tokens+1" if n == tokens + 1 else ""


def draw_batch(rng: random.Random, spec: CaptureSpec, support: Support, num_reqs: int | None = None) -> Batch:
    """A batch drawn with ``rng``: up to ``max_reqs`` requests, query lengths the support allows, sequence lengths
    anywhere in ``[q, max_seq_len]``, distinct blocks (never the null block 0), a seed other than the capture's."""
    n = num_reqs or rng.randint(1, spec.max_reqs)
    if support == Support.UNIFORM_SINGLE_TOKEN_DECODE:
        qs = [1] * n
    elif support == Support.UNIFORM_BATCH:
        lo, hi = spec.uniform_lengths()
        qs = [rng.randint(lo, hi)] * n
    else:
        qs = [rng.randint(1, spec.max_query_len) for _ in range(n)]
    seqs = [rng.randint(q, spec.max_seq_len) for q in qs]
    free = list(range(1, spec.num_blocks))
    rng.shuffle(free)
    table = []
    for s in seqs:
        need = -(-s // spec.block_size)
        table.append(tuple(free[:need]))
        free = free[need:]
    seed = rng.randrange(1, CAPTURE_SEED - 1)
    return Batch(tuple(qs), tuple(seqs), tuple(table), seed=seed)


def _holder(root: Any, steps: tuple[Step, ...]) -> Any:
    try:
        return resolve_steps(root, steps)[0]
    except (AttributeError, KeyError, IndexError, TypeError):
        return None


def profile(name: str, cls: type, engine: Any) -> Profile:
    """Capture one instance of ``cls`` at its largest size and list its buffers (see the module docstring)."""
    spec, support = spec_of(cls), support_of(cls)
    size = max(spec.default_capture_sizes())
    t = cls()
    with torch.no_grad():
        with engine.host_memory():
            t.setup(spec, engine.device)
        statics = static_keys(t)
        at_setup = {path for path, _, _ in walk_steps(t, every_path=True, steps=False)}
        with engine.host_memory():
            capture_prepare(t)(POLICIES["worst"].batch_for(spec, support, size))
        engine.warmup(t.forward, skip_keys=statics)
        graph = engine.capture(t.forward, pool=engine.new_pool())
        read = set(graph.recording.external)
        drawn = draw_batch(random.Random(7), spec, support).padded(size)
        held = storages_of(t, statics)
        holders = {path: _holder(t, steps) for path, steps, _ in walk_steps(t, every_path=True)}
        written = prepare_writes(held, lambda: t.prepare(drawn))
    by_storage = paths_by_storage(t)
    extra = int(getattr(cls, "extra_requests", 0) or 0)
    out = Profile(name)
    # one path per tensor object: the plainest (fewest item steps, then shortest) of every path to it
    best: dict[int, tuple[tuple[int, int], str, tuple[Step, ...], torch.Tensor]] = {}
    for path, steps, x in walk_steps(t, every_path=True):
        rank = (sum(1 for item, _ in steps if item), len(steps))
        if id(x) not in best or rank < best[id(x)][0]:
            best[id(x)] = (rank, path, steps, x)
    for _, path, steps, x in sorted(best.values(), key=lambda v: v[1]):
        if x.numel() == 0 or any(item and not isinstance(k, int) for item, k in steps):
            continue  # (a dict key may hold an object's id: not the same in another process)
        if path not in at_setup:
            continue  # made by prepare() or forward() (a wrapper per size): not there for an operator to find
        key = storage_key(x)
        if key in statics or key == 0:
            continue
        nbytes = x.untyped_storage().nbytes()
        last_item, last_key = steps[-1]
        holder = _holder(t, steps)
        # an operator rebinds on an object that prepare() keeps (not one it builds anew every step)
        rebindable = holder is holders.get(path) and (
            (not last_item and not isinstance(holder, tuple)) or isinstance(holder, (dict, list))
        )
        buf = Buffer(
            path=path,
            steps=[[i, k] for i, k in steps],
            shape=list(x.shape),
            dtype=str(x.dtype).removeprefix("torch."),
            whole=x.storage_offset() == 0 and x.numel() * x.element_size() == nbytes and x.is_contiguous(),
            shared=len(by_storage.get(key, ())) > 1,
            rebindable=rebindable,
            rows=_rows(int(x.shape[0]), spec, extra) if x.dim() else "",
        )
        if key in read and key in written:
            out.written.append(buf)
        elif key not in read and key not in written:
            out.unread.append(buf)
    return out

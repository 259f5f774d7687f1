"""graphsafe.guard in an engine-shaped runner (examples/guarded_runner.py) over the reference backends:
the stale-pointer and unpersisted-metadata variants are caught on their first guarded replay, the
frozen host values when the runner passes them, and the fixed variants pass strict guarding
(10,000 replays on a GPU; on the CPU emulator, whose replays are slow Python, 1,000 checked steps
of which every 250th is replayed)."""

from __future__ import annotations

import importlib.util
import math
import random
from pathlib import Path

import pytest

from graphsafe import Batch, FindingKind, GuardError, reference
from graphsafe.reports import load_finding

_path = Path(__file__).resolve().parents[2] / "examples" / "guarded_runner.py"
_spec = importlib.util.spec_from_file_location("guarded_runner", _path)
runner_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner_module)
GraphRunner, draw_batch, main = runner_module.GraphRunner, runner_module.draw_batch, runner_module.main


def one_request(spec, query_len: int, seq_len: int, seed: int = 1) -> Batch:
    blocks = tuple(range(1, 1 + math.ceil(seq_len / spec.block_size)))
    return Batch((query_len,), (seq_len,), (blocks,), seed=seed)


# (variant, kind, capture order, where starts with); batch_sized_buffers reallocates only when a later
# capture is larger, i.e. when sizes are captured ascending (largest first, its buffers never move)
BUGS = [
    ("flashmla_fp8:fresh_buffers", FindingKind.STALE_POINTER, "descending", "self.tile_scheduler_metadata"),
    ("flex:batch_sized_buffers", FindingKind.STALE_POINTER, "ascending", "self.meta."),
    ("flex:fresh_metadata", FindingKind.UNPERSISTED_METADATA, "descending", "self.meta."),
]


@pytest.mark.parametrize("name,kind,order,where", BUGS, ids=[b[0] for b in BUGS])
def test_a_buggy_variant_is_caught_on_its_first_guarded_replay(name, kind, order, where, engine):
    runner = GraphRunner(
        reference.resolve(name), engine=engine, order=order, guard_options=dict(mode="sample", every=100)
    )
    runner.capture()
    with pytest.raises(GuardError) as e:
        runner.step(one_request(runner.spec, 1, runner.spec.max_seq_len // 2))  # graph 1's first replay
    f = e.value.finding
    assert f.kind == kind and f.where.startswith(where), f.summary()
    assert f.target == name and f.capture_size == 1 and f.details["replay"] == 0
    assert runner.guard.stats()[1]["checks"] == 1


HOST = [
    # split_len derived from the batch's max_seq_len (48 keys need 2 splits of 24, the capture froze 32)
    (
        "triton_mla:capture_max_seq_len",
        lambda spec: one_request(spec, 1, 48),
        "latent_attention_partial_kernel.split_len",
    ),
    # the uniform fast path frozen at capture; a mixed batch needs the general one
    (
        "mla_indexer:frozen_uniform_branch",
        lambda spec: Batch((1, 2), (8, 20), ((1,), (2, 3)), seed=1),
        "_expand_tokens_kernel.UNIFORM",
    ),
]


@pytest.mark.parametrize("name,batch,where", HOST, ids=[h[0] for h in HOST])
def test_a_frozen_host_value_the_runner_passes_is_caught(name, batch, where, engine):
    runner = GraphRunner(reference.resolve(name), engine=engine, sizes=(2,), guard_options=dict(mode="sample"))
    runner.capture()
    with pytest.raises(GuardError) as e:
        runner.step(batch(runner.spec))
    assert e.value.finding.kind == FindingKind.FROZEN_HOST_VALUE and e.value.finding.where == where


@pytest.mark.parametrize("name", reference.FIXED)
def test_a_fixed_variant_passes_strict_guarding(name, engine):
    steps, replay_every = (10_000, 1) if engine == "cuda" else (1_000, 250)
    runner = GraphRunner(reference.resolve(name), engine=engine, guard_options=dict(mode="strict"))
    runner.capture()
    rng = random.Random(0)
    hv = runner.host_values
    for i in range(steps):
        batch = draw_batch(rng, runner.spec, runner.backend.support, seed=i + 1)
        if i % replay_every == 0:
            runner.step(batch)
            continue
        size = min(s for s in runner.graphs if s >= batch.num_reqs)
        runner.backend.prepare(batch.padded(size))
        runner.guard.before_replay(size, hv(runner.backend) if hv else None)
    assert runner.guard.findings == []
    assert sum(s["checks"] for s in runner.guard.stats().values()) == steps


def test_the_example_logs_and_reports_and_exits_1(tmp_path, engine, capsys):
    code = main(
        [
            "flex:fresh_metadata",
            "--engine",
            engine,
            "--steps",
            "2",
            "--mode",
            "strict",
            "--on-failure",
            "log",
            "--report-dir",
            str(tmp_path),
        ]
    )
    assert code == 1
    (report,) = [p.parent for p in tmp_path.rglob("finding.json")]
    f = load_finding(report)
    assert f.kind == FindingKind.UNPERSISTED_METADATA and f.target == "flex:fresh_metadata" and f.probe == "guard"
    assert "unpersisted-metadata" in capsys.readouterr().out

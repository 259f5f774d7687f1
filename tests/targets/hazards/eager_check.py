"""Eager correctness of every hazard target against plain softmax attention (no graphs).

``python -m tests.targets.hazards.eager_check`` runs each target eagerly over a few random
step sequences, unpadded and padded (``num_slots`` up to ``max_reqs``), and compares the
live rows with a reference computed token by token.  Buggy targets whose bug shows only
with padding (stale or poisoned padding) are checked unpadded only.
"""

from __future__ import annotations

from ._common import use_interpreter

use_interpreter()

import argparse  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

import graphsafe  # noqa: E402
from graphsafe import Batch, Support  # noqa: E402

from . import EXPECTED, SAFE, paged_decode, spec_decode, state  # noqa: E402  # noqa: E402
from ._common import D, H, reference_attention, write_reference_kv  # noqa: E402


def random_batch(spec, support, rng: random.Random, seed: int) -> Batch:
    n = rng.randint(1, spec.max_reqs)
    if support == Support.UNIFORM_SINGLE_TOKEN_DECODE:
        qs = [1] * n
    elif support == Support.UNIFORM_BATCH:
        qs = [rng.randint(1, spec.max_query_len)] * n
    else:
        qs = [rng.randint(1, spec.max_query_len) for _ in range(n)]
    seqs = [rng.randint(q, spec.max_seq_len) for q in qs]
    blocks = list(range(1, spec.num_blocks))
    rng.shuffle(blocks)
    table = []
    for s in seqs:
        need = math.ceil(s / spec.block_size)
        table.append(tuple(blocks[:need]))
        blocks = blocks[need:]
    return Batch(tuple(qs), tuple(seqs), tuple(table), seed=seed)


def randomise(target, seed: int) -> None:
    for name, t in dict(target.static()).items():
        if t.dtype.is_floating_point:
            t.copy_(graphsafe.seeded(tuple(t.shape), seed=graphsafe.derive_seed(seed, name), dtype=t.dtype))


def _state_reference(target, ref_pool: dict, batch: Batch) -> torch.Tensor:
    """Per-request recurrence / conv reference for the state targets."""
    x = graphsafe.seeded((batch.num_reqs, H, D), seed=graphsafe.derive_seed(batch.seed, "x"))
    outs = []
    for r in range(batch.num_reqs):
        slot = batch.block_table[r][0] - 1
        if isinstance(target, state.RecurrentDecode):
            qkv = [torch.einsum("hd,hde->he", x[r], target.w_qkv[i]) for i in range(3)]
            k = qkv[1] / (1.0 + qkv[1].norm(dim=-1, keepdim=True))
            g = torch.sigmoid(target.gate_logit)[:, None, None]
            s_new = g * ref_pool[slot] + k[:, :, None] * qkv[2][:, None, :]
            ref_pool[slot] = s_new
            outs.append(torch.einsum("hd,hde->he", qkv[0], s_new).reshape(-1))
        else:
            prev = torch.zeros_like(ref_pool[slot]) if batch.seq_lens[r] == 1 else ref_pool[slot]
            window = torch.cat([prev, x[r].reshape(-1, 1)], dim=1)
            ref_pool[slot] = window[:, 1:].clone()
            outs.append(torch.nn.functional.silu((window * target.conv_w).sum(-1)))
    return torch.stack(outs)


def check_class(cls, steps: int, sequences: int, padded: bool) -> str | None:
    spec = cls.default_spec
    rng = random.Random(hash(cls.__name__) & 0xFFFF)
    for seq in range(sequences):
        t = cls()
        t.setup(spec, torch.device("cpu"))
        randomise(t, seq)
        static = {k: v.clone() for k, v in dict(t.static()).items()}
        for step in range(steps):
            b = random_batch(spec, cls.support, rng, seed=1 + seq * 100 + step)
            if padded:
                b = b.padded(rng.randint(b.num_reqs, spec.max_reqs))
            t.prepare(b)
            out = t.forward()
            got = t.live(out if isinstance(out, tuple) else (out,), b)[0].float()
            if issubclass(cls, (state.RecurrentDecode, state.ConvDecode)):
                pool = static["state"] if "state" in static else static["conv_state"]
                ref_pool = {i: pool[i] for i in range(pool.shape[0])}
                want = _state_reference(t, ref_pool, b)
                for i, v in ref_pool.items():
                    pool[i] = v
                got_state = dict(t.static())["state" if "state" in static else "conv_state"]
                if not torch.allclose(got_state, pool, atol=1e-4, rtol=1e-4):
                    return f"sequence {seq} step {step} {b.short()}: state differs"
            else:
                write_reference_kv(b, spec, static["k_cache"], static["v_cache"])
                temp = None
                if issubclass(cls, paged_decode.DeviceTemperature):
                    temp = 1.0 + paged_decode.TEMP_BETA * math.log1p(b.max_seq_len / paged_decode.TEMP_FLOOR)
                want = reference_attention(b, spec, static["k_cache"], static["v_cache"], temp)
                if issubclass(cls, (paged_decode.Fp8OutPagedDecode, spec_decode.SpecDecode)):
                    want = want / want.abs().amax().clamp_min(1e-6)
                for name in ("k_cache", "v_cache"):
                    if not torch.allclose(dict(t.static())[name], static[name], atol=1e-6):
                        return f"sequence {seq} step {step} {b.short()}: {name} differs from the reference cache"
            tol = 1e-2 if got.dtype == torch.bfloat16 or out.dtype == torch.bfloat16 else 1e-4
            if got.shape != want.shape or not torch.allclose(got, want, atol=tol, rtol=tol):
                err = (got - want).abs().max().item() if got.shape == want.shape else f"shape {tuple(got.shape)}"
                return f"sequence {seq} step {step} {b.short()}: output differs (max abs {err})"
    return None


PADDING_BUGS = {"stale-padding"}
#: buggy targets whose mistake shows in any padded run, graph or not (graphsafe's eager runs are unpadded)
PADDED_EAGER_WRONG = {"MetadataOfBatchSize"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--sequences", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args(argv)
    classes = list(SAFE) + list(EXPECTED)
    if args.only:
        want = set(args.only.split(","))
        classes = [c for c in classes if c.__name__ in want]
    bad = 0
    for cls in classes:
        modes = [False]
        if cls in SAFE or not (EXPECTED[cls] & PADDING_BUGS or cls.__name__ in PADDED_EAGER_WRONG):
            modes.append(True)
        for padded in modes:
            try:
                err = check_class(cls, args.steps, args.sequences, padded)
            except Exception as e:  # noqa: BLE001
                err = f"raised {type(e).__name__}: {e}"
            label = f"{cls.__module__.rsplit('.', 1)[-1]}:{cls.__name__}{' (padded)' if padded else ''}"
            print(f"{'ok  ' if err is None else 'FAIL'} {label}" + ("" if err is None else f": {err}"))
            bad += err is not None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

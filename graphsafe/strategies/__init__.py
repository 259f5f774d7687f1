"""Hypothesis strategies for graphsafe's contract: specs, batches and replay sequences.

In the style of ``hypothesis.extra.numpy``: every argument after the
positional ``spec`` is keyword-only and accepts either a plain value or a
Hypothesis strategy for that value (a strategy is drawn once per example).
A ``spec`` may itself be a strategy such as :func:`capture_specs`.

Every strategy yields values that pass ``CaptureSpec.validate_batch`` and
``Batch`` construction, and shrinks towards the simplest case a human would
write by hand: few requests, query length 1, sequence length equal to the
query length, block tables ``1, 2, 3, ...`` in order, seed 0.

Example::

    from hypothesis import given
    from graphsafe import CaptureSpec, Support
    from graphsafe.strategies import batches, step_sequences

    spec = CaptureSpec(max_reqs=8, max_query_len=2, max_seq_len=256, block_size=16)

    @given(batches(spec, support=Support.UNIFORM_BATCH))
    def test_prepare_accepts(batch):
        spec.validate_batch(batch)
"""

from __future__ import annotations

from ._batches import batches, block_tables, capture_batches, capture_specs, decode_lengths, seq_lens
from ._steps import step_sequences

__all__ = [
    "capture_specs",
    "decode_lengths",
    "seq_lens",
    "block_tables",
    "batches",
    "capture_batches",
    "step_sequences",
]

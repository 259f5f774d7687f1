"""Rows of a graph input that ``prepare()`` leaves unwritten decide nothing by themselves: a backend whose graph
gathers only the rows it wrote is safe, and its twin whose padded rows alias a live slot is stale padding, not a
``replay-mismatch`` (the same step run unpadded on a fresh instance agrees with eager: the poison is never read)."""

from __future__ import annotations

import graphsafe
from tests.targets import scaled_blocks as T


def check(cls):
    return graphsafe.check(cls, engine="emulate", examples=15, seed=0, database=False)


def test_a_partly_written_buffer_the_graph_reads_only_where_written_is_safe():
    result = check(T.ScaledBlocks)
    assert result.ok and not result.findings, result.summary()


def test_padded_rows_aliasing_a_live_slot_are_stale_padding_despite_unwritten_rows_elsewhere():
    result = check(T.ScaledBlocksPadAlias)
    assert result.kinds == {"stale-padding"}, result.summary()
    assert all("unwritten" not in f.message for f in result.errors), result.summary()


def test_padded_requests_keeping_an_earlier_batchs_scale_only_their_own_rows_use_is_safe():
    result = check(T.ScaledRequests)
    assert result.ok and not result.findings, result.summary()


def test_that_backend_with_padded_rows_aliasing_a_live_slot_is_stale_padding():
    result = check(T.ScaledRequestsPadAlias)
    assert result.kinds == {"stale-padding"}, result.summary()

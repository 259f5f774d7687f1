"""Capture batches of a spec that fixes the uniform query length (vLLM's uniform-decode graphs)."""

from graphsafe import CaptureSpec, Support
from graphsafe.capture.policies import POLICIES, capture_query_len

SPEC = CaptureSpec(max_reqs=4, max_query_len=4, max_seq_len=64, uniform_query_len=2)


def test_uniform_batch_graphs_are_captured_at_the_specs_uniform_query_len():
    assert capture_query_len(Support.UNIFORM_BATCH, SPEC) == 2
    for name in ("worst", "minimal"):
        assert set(POLICIES[name].batch_for(SPEC, Support.UNIFORM_BATCH, 4).query_lens) == {2}


def test_mixed_batch_graphs_are_captured_at_the_longest_query():
    assert capture_query_len(Support.ALWAYS, SPEC) == 4

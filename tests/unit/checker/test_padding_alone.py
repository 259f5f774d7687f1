"""Whether the buffers an example's history changed put a difference down to the padding alone (the rule of
the diagnosis-stage stale-padding probe): rows are (first, last) where a buffer differs from a fresh prepare()'s."""

from __future__ import annotations

from graphsafe.diagnosis.padding import padding_alone

RECORDED = {"self.slot_mapping", "self.seq_lens"}


def test_a_buffer_that_differs_only_past_the_live_requests_is_the_padding():
    past, stop = padding_alone({"self.slot_mapping": (6, 7)}, num_reqs=6, recorded=RECORDED)
    assert past == {"self.slot_mapping": (6, 7)} and stop == []


def test_a_live_row_difference_in_a_buffer_a_recorded_launch_reads_stops_the_claim():
    past, stop = padding_alone({"self.slot_mapping": (6, 7), "self.seq_lens": (0, 7)}, num_reqs=6, recorded=RECORDED)
    assert stop == ["self.seq_lens"]


def test_a_live_row_difference_only_the_graph_reader_shows_does_not_stop_it():
    differing = {"self.slot_mapping": (6, 7), "self.wrapper._float_workspace_buffer": (0, 4095)}
    past, stop = padding_alone(differing, num_reqs=6, recorded=RECORDED)
    assert past == {"self.slot_mapping": (6, 7)} and stop == []


def test_nothing_past_the_live_requests_is_no_padding():
    past, _ = padding_alone({"self.seq_lens": (2, 3)}, num_reqs=6, recorded=RECORDED)
    assert past == {}

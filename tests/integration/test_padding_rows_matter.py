"""The experiment behind a stale-padding claim read off the example's history (``padding.rows_matter``): rows past
the live requests that hold other values than a fresh instance's are a cause only where the replay, from the state
before it, comes out otherwise once they hold the fresh values.  Padded slot rows an earlier, larger batch left do;
rows the graph reads but whose values change nothing (a count, the tail of a flat array past the live pages) do
not, and the stale-padding probe does not claim them."""

from __future__ import annotations

import pytest
import torch

import graphsafe
from graphsafe.diagnosis import Probe, loop
from graphsafe.diagnosis.padding import rows_matter
from graphsafe.findings import FindingKind
from tests.integration.test_repair import STEP
from tests.targets.hazards.paged_decode import PrefixOnlyMetadata


class PrefixOnlyCounted(PrefixOnlyMetadata):
    """Stale padded slots (as ``PrefixOnlyMetadata``), and ``self.calls``: rows 1.. of a count of prepare() calls
    the graph reads, which adds nothing (a fresh instance holds other values there)."""

    def setup(self, spec, device) -> None:
        super().setup(spec, device)
        self.calls = torch.zeros(4, dtype=torch.int64, device=self.device)

    def prepare(self, batch) -> None:
        super().prepare(batch)
        self.calls[1:] += 1

    def forward(self):
        return super().forward() + self.calls.clamp(max=0).sum()  # read, adds 0


@pytest.fixture
def experiments(monkeypatch):
    """In place of the diagnosis probes, one that runs the experiment on two sets of rows at the diagnosed step."""
    seen: dict[str, bool] = {}

    def look(ctx):
        fresh = ctx.evidence.fresh_scratch.buffers_after_prepare
        tokens, rows = ctx.batch.num_tokens, ctx.session.target.slot_mapping.shape[0]
        seen["padded slots"] = rows_matter(ctx, {"self.slot_mapping": (tokens, rows - 1)}, fresh)
        seen["count"] = rows_matter(ctx, {"self.calls": (1, 3)}, fresh)
        return None

    spy = Probe("stale-padding", FindingKind.STALE_PADDING, "diagnosis", look, "runs the rows experiment")
    monkeypatch.setattr(loop, "at_stage", lambda stage: (spy,))
    return seen


def test_padded_slots_an_earlier_batch_left_change_the_replay_and_a_count_the_graph_reads_does_not(experiments):
    graphsafe.reproduce(PrefixOnlyCounted, [STEP], engine="emulate")
    assert experiments == {"padded slots": True, "count": False}


def test_the_stale_padding_probe_still_claims_padded_slots_beside_rows_that_change_nothing():
    [f] = graphsafe.reproduce(PrefixOnlyCounted, [STEP], engine="emulate").errors
    assert f.kind.value == "stale-padding" and "self.slot_mapping" in f.message, f.summary()


def test_the_probe_does_not_claim_rows_past_the_live_requests_that_change_nothing(monkeypatch):
    """The probe's row selection narrowed to the count alone: the experiment finds it changes nothing, so the probe
    claims nothing, and the repair experiment names the padded slots instead."""
    from graphsafe.diagnosis.probes import stale_padding

    monkeypatch.setattr(stale_padding, "padding_alone", lambda differing, n, recorded: ({"self.calls": (1, 3)}, []))
    [f] = graphsafe.reproduce(PrefixOnlyCounted, [STEP], engine="emulate").errors
    assert "self.calls" not in f.message, f.summary()
    assert f.where == "self.slot_mapping" and "the replay equal eager" in f.message, f.summary()

"""One bug, one finding: findings are grouped by the cause they name."""

from graphsafe import Finding, FindingKind
from graphsafe.diagnosis.causes import group_by_cause


def finding(kind: FindingKind, where: str, cause: str = "", examples: int = 1, severity: str = "error") -> Finding:
    return Finding(
        kind=kind,
        message=f"{kind.value} at {where}",
        where=where,
        cause=cause,
        examples_to_find=examples,
        severity=severity,
    )


def test_findings_of_one_buffer_become_one_finding_of_the_most_specific_kind():
    stale = finding(FindingKind.STALE_POINTER, "self.meta.kv", "buffer:self.meta.kv", examples=3)
    unpersisted = finding(FindingKind.UNPERSISTED_METADATA, "self.meta.kv", "buffer:self.meta.kv", examples=1)
    [one] = group_by_cause([unpersisted, stale])
    assert one.kind == FindingKind.STALE_POINTER
    assert one.details["evidence"] == [
        {
            "kind": "unpersisted-metadata",
            "where": "self.meta.kv",
            "message": "unpersisted-metadata at self.meta.kv",
            "capture_policy": "",
        }
    ]


def test_two_causes_stay_two_findings():
    a = finding(FindingKind.STALE_POINTER, "self.a", "buffer:self.a")
    b = finding(FindingKind.LAZY_INIT, "self.plan", "buffer:self.plan")
    assert {f.kind for f in group_by_cause([a, b])} == {FindingKind.STALE_POINTER, FindingKind.LAZY_INIT}


def test_a_symptom_joins_the_cause_it_shows():
    frozen = finding(FindingKind.FROZEN_HOST_VALUE, "k.num_splits", "argument:k.num_splits")
    unwritten = finding(FindingKind.OUTPUT_NOT_WRITTEN, "output[0]", "output:output[0]")
    [one] = group_by_cause([unwritten, frozen])
    assert one.kind == FindingKind.FROZEN_HOST_VALUE
    assert one.details["evidence"][0]["kind"] == "output-not-written"


def test_a_symptom_of_a_higher_ranked_kind_joins_the_cause_as_evidence_and_does_not_lead():
    stale = finding(FindingKind.STALE_PADDING, "self.slot_mapping", "buffer:self.slot_mapping", examples=4)
    race = finding(FindingKind.NONDETERMINISTIC_REPLAY, "output[0]", "output:output[0]", examples=2)
    [one] = group_by_cause([race, stale])
    assert (one.kind, one.where) == (FindingKind.STALE_PADDING, "self.slot_mapping")
    assert one.details["evidence"][0]["kind"] == "nondeterministic-replay"


def test_symptoms_without_a_cause_are_kept():
    unwritten = finding(FindingKind.OUTPUT_NOT_WRITTEN, "output[0]", "output:output[0]")
    assert group_by_cause([unwritten]) == [unwritten]


def test_info_findings_are_not_merged_into_errors():
    info = finding(FindingKind.SUPPORT_MISMATCH, "T.support", severity="info")
    error = finding(FindingKind.STALE_POINTER, "self.a", "buffer:self.a")
    assert group_by_cause([info, error]) == [error, info]


def test_a_finding_without_a_named_cause_is_its_own_by_kind_and_where():
    f = Finding(kind=FindingKind.REPLAY_MISMATCH, message="m", where="output[1]")
    assert f.cause == "replay-mismatch:output[1]"


def test_one_buffer_path_in_several_graphs_entries_is_one_cause():
    size_1 = finding(FindingKind.STALE_POINTER, "self.meta[1].kv", "buffer:self.meta[1].kv")
    size_4 = finding(FindingKind.STALE_POINTER, "self.meta[4].kv", "buffer:self.meta[4].kv", examples=5)
    [one] = group_by_cause([size_4, size_1])
    assert one.where == "self.meta[1].kv" and one.details["evidence"][0]["where"] == "self.meta[4].kv"


def test_values_one_host_decision_froze_are_one_finding_that_lists_them_all():
    where = "host:graphsafe/reference/_common.py in latent_attention"
    split = finding(FindingKind.FROZEN_HOST_VALUE, "k.split_len", where, examples=2)
    branch = finding(FindingKind.FROZEN_HOST_VALUE, "combine <launch sequence>", where, examples=5)
    [one] = group_by_cause([branch, split])
    assert one.where == "k.split_len"
    assert one.details["frozen"] == ["k.split_len", "combine <launch sequence>"]
    assert "also froze: combine <launch sequence>" in one.message

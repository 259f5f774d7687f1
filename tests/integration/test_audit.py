"""The support-level audit: the highest level a target's graph can safely serve, against the declared one."""

import json

import pytest

import graphsafe
from graphsafe import CheckOptions, FindingKind
from tests.targets import levels as L
from tests.targets import synthetic as S


def run(cls, engine, **kw):
    return graphsafe.audit(cls, CheckOptions(engine=engine, database=False, seed=0, **kw))


class Conservative(S.Safe):
    support = graphsafe.Support.UNIFORM_BATCH


class Overclaims(S.Safe):
    """Safe for single-token decode only: the capture's query length is frozen into the graph."""

    support = graphsafe.Support.ALWAYS

    def prepare(self, batch):
        super().prepare(batch)
        self.q = batch.max_query_len

    def forward(self):
        out = super().forward()
        return out * float(self.q)  # frozen: right only for the capture's query length


def test_support_mismatch_is_reported_as_info_when_a_higher_level_passes(engine):
    result = run(Conservative, engine, examples=6)
    assert result.ok
    [info] = [f for f in result.findings if f.kind == FindingKind.SUPPORT_MISMATCH]
    assert info.severity == "info" and "ALWAYS" in info.message


def test_support_mismatch_is_an_error_when_the_declared_level_breaks_but_a_lower_passes(engine):
    result = run(Overclaims, engine, examples=20)
    assert not result.ok
    [error] = result.findings
    assert error.kind == FindingKind.SUPPORT_MISMATCH and error.severity == "error"
    assert result.safe == graphsafe.Support.UNIFORM_SINGLE_TOKEN_DECODE and "frozen-host-value" in error.message


# -- targets safe exactly up to each level ----------------------------------------------------------
@pytest.mark.parametrize(
    "cls, safe",
    [
        (L.SafeUpToDecode, graphsafe.Support.UNIFORM_SINGLE_TOKEN_DECODE),
        (L.SafeUpToUniform, graphsafe.Support.UNIFORM_BATCH),
        (L.SafeAlways, graphsafe.Support.ALWAYS),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_the_audit_names_the_highest_safe_level(cls, safe):
    result = run(cls, "emulate", examples=8)
    assert result.safe == safe, result.summary()
    assert result.ok == (cls.support <= safe)


def test_batches_a_target_cannot_run_above_its_declared_level_are_unsafe_not_errors():
    result = run(L.DecodeOnlyRows, "emulate", examples=4)
    assert result.safe == graphsafe.Support.UNIFORM_SINGLE_TOKEN_DECODE and result.ok, result.summary()
    above = [c for c in result.cells if c.level > graphsafe.Support.UNIFORM_SINGLE_TOKEN_DECODE]
    assert above and all(c.first.kind == FindingKind.TARGET_ERROR and "cannot run" in c.first.message for c in above)


def test_a_target_safe_only_under_one_capture_policy_is_named_for_each():
    result = run(L.SafeOnlyUnderWorstCase, "emulate", examples=8)
    assert result.safe_for("worst") == graphsafe.Support.ALWAYS
    assert result.safe_for("minimal") == graphsafe.Support.NEVER
    assert result.safe == graphsafe.Support.NEVER and not result.ok
    [error] = result.findings
    assert "under minimal capture" in error.message and "frozen-host-value" in error.message


def test_the_table_has_every_batch_kind_under_every_policy_and_its_cost():
    result = run(L.SafeUpToDecode, "emulate", examples=4)
    rows = result.table()
    assert [r["batch kind"] for r in rows] == ["decode", "uniform q=2", "uniform q=3", "uniform q=4", "mixed"]
    assert all(set(r["cells"]) == {"worst", "minimal"} for r in rows)
    assert rows[0]["cells"]["worst"]["verdict"] == "ok" and rows[1]["cells"]["worst"]["verdict"] == "frozen-host-value"
    assert result.checks == 10 and result.examples >= 10 and result.seconds > 0


def test_the_audit_writes_its_table_to_the_report_folder(tmp_path):
    graphsafe.audit(L.SafeUpToDecode, engine="emulate", examples=3, database=False, seed=0, report_dir=tmp_path)
    d = tmp_path / "tests.targets.levels_SafeUpToDecode"
    data = json.loads((d / "audit.json").read_text())
    assert data["safe"] == "UNIFORM_SINGLE_TOKEN_DECODE" and data["declared"] == "UNIFORM_SINGLE_TOKEN_DECODE"
    md = (d / "audit.md").read_text()
    assert "| decode | UNIFORM_SINGLE_TOKEN_DECODE | ok (" in md and "**frozen-host-value**" in md


def test_the_cli_audit_prints_the_table_and_exits_1_when_the_declared_level_is_unsafe(capsys):
    from graphsafe.frontend.cli import main

    assert (
        main(
            [
                "audit",
                "tests.targets.levels:SafeOnlyUnderWorstCase",
                "--engine",
                "emulate",
                "--examples",
                "3",
                "--seed",
                "0",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert "batch kind" in out and "worst capture" in out and "minimal capture" in out
    assert "declared Support.ALWAYS, highest safe Support.NEVER (10 checks," in out
    assert (
        main(
            [
                "audit",
                "tests.targets.levels:SafeAlways",
                "--engine",
                "emulate",
                "--examples",
                "3",
                "--capture",
                "worst",
                "--seed",
                "0",
            ]
        )
        == 0
    )


def test_the_plugin_audits_instead_of_checking(pytester, monkeypatch):
    from tests.subprocesses import OUTER_RUN_VARS, env_with_repo, failure_sections, plugin_args

    for var in OUTER_RUN_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHONPATH", env_with_repo()["PYTHONPATH"])
    result = pytester.runpytest_subprocess(
        *plugin_args(),
        "-p",
        "no:cacheprovider",
        "--graphsafe-engine",
        "emulate",
        "--graphsafe-examples",
        "3",
        "--graphsafe-audit",
        "--graphsafe",
        "tests.targets.levels:SafeUpToDecode",
        "--graphsafe",
        "tests.targets.levels:SafeOnlyUnderWorstCase",
        timeout=600,
    )
    result.assert_outcomes(passed=1, failed=1)
    text = failure_sections(result)["graphsafe[tests.targets.levels:SafeOnlyUnderWorstCase]"]
    assert "declared Support.ALWAYS, highest safe Support.NEVER" in text and "under minimal capture" in text

"""The support-level audit: the highest level a target's graph can safely serve, against the declared one."""

import graphsafe
from graphsafe import CheckOptions, FindingKind
from tests.targets import synthetic as S


def run(cls, engine, **kw):
    return graphsafe.audit(cls, CheckOptions(engine=engine, database=False, seed=0, **kw))


def test_support_mismatch_is_reported_as_info_when_a_higher_level_passes(engine):
    class Conservative(S.Safe):
        support = graphsafe.Support.UNIFORM_BATCH

    result = run(Conservative, engine, examples=6)
    assert result.ok
    [info] = [f for f in result.findings if f.kind == FindingKind.SUPPORT_MISMATCH]
    assert info.severity == "info" and "ALWAYS" in info.message


def test_support_mismatch_is_an_error_when_the_declared_level_breaks_but_a_lower_passes(engine):
    class Overclaims(S.Safe):
        support = graphsafe.Support.ALWAYS

        def prepare(self, batch):
            super().prepare(batch)
            self.q = batch.max_query_len

        def forward(self):
            out = super().forward()
            return out * float(self.q)  # frozen: right only for the capture's query length

    result = run(Overclaims, engine, examples=20)
    assert not result.ok
    [error] = result.findings
    assert error.kind == FindingKind.SUPPORT_MISMATCH and error.severity == "error"
    assert result.safe == graphsafe.Support.UNIFORM_SINGLE_TOKEN_DECODE and "frozen-host-value" in error.message

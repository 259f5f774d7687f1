"""``--graphsafe-shard K/N`` in the pytest plugin: the shards of a CI matrix collect every target once.

Collection only, in-process, with the synthetic torch-only targets.
"""

from __future__ import annotations

import pytest

from tests.subprocesses import OUTER_RUN_VARS, plugin_args
from tests.targets.plain_torch import SOURCE

TARGETS = ["mymod:Safe", "mymod:Fresh", "mymod:Fresh2", "mymod:WrongType", "flex", "flex:fresh_metadata"]


@pytest.fixture
def gs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for var in OUTER_RUN_VARS:
        monkeypatch.delenv(var, raising=False)
    pytester.makepyfile(mymod=SOURCE)
    pytester.syspathinsert()
    return pytester


def collected(gs: pytest.Pytester, *args: str) -> pytest.RunResult:
    targets = [a for t in TARGETS for a in ("--graphsafe", t)]
    return gs.runpytest_inprocess(
        *plugin_args(), "-p", "no:cacheprovider", "--graphsafe-engine", "auto", "--collect-only", "-q", *targets, *args
    )


def ids(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("graphsafe[")]


@pytest.mark.parametrize("n", [2, 3])
def test_the_shards_of_a_matrix_collect_every_target_once(gs, n):
    together = [i for k in range(1, n + 1) for i in ids(collected(gs, "--graphsafe-shard", f"{k}/{n}"))]
    assert sorted(together) == sorted(f"graphsafe[{t}]" for t in TARGETS)


def test_the_shard_comes_from_the_ini_file_too(gs):
    gs.makeini("[pytest]\ngraphsafe_shard = 2/2\n")
    assert ids(collected(gs)) == ids(collected(gs, "--graphsafe-shard", "2/2"))
    assert len(ids(collected(gs))) < len(TARGETS)


@pytest.mark.parametrize("bad", ["3/2", "0/2", "a/b"])
def test_a_bad_shard_is_a_usage_error(gs, bad):
    result = collected(gs, "--graphsafe-shard", bad)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "graphsafe: --graphsafe-shard: " in result.stderr.str()

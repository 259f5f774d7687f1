"""The ``cuda`` marker (tests/conftest.py): a marked test, and the ``engine="cuda"`` case of every
engine-parametrised test, runs where CUDA is available and is skipped, saying why, everywhere else."""

from __future__ import annotations

from tests.conftest import HAS_CUDA, NO_CUDA

CONFTEST = "from tests.conftest import pytest_collection_modifyitems, pytest_generate_tests  # noqa: F401\n"
INI = "[pytest]\nmarkers =\n    cuda: needs an NVIDIA GPU\n"


def test_a_cuda_marked_test_runs_only_where_cuda_is_available_and_otherwise_skips_saying_why(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile("import pytest\n\n@pytest.mark.cuda\ndef test_gpu():\n    pass\n\ndef test_cpu():\n    pass\n")
    passed, skipped, failed = pytester.inline_run("-p", "no:graphsafe").listoutcomes()
    assert failed == []
    if HAS_CUDA:
        assert len(passed) == 2 and skipped == []
    else:
        assert [r.nodeid.split("::")[-1] for r in passed] == ["test_cpu"]
        [skip] = skipped
        assert skip.nodeid.endswith("::test_gpu") and skip.longrepr[2] == f"Skipped: {NO_CUDA}"


def test_the_cuda_case_of_an_engine_parametrised_test_carries_the_marker(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile("def test_on(engine):\n    pass\n")
    result = pytester.runpytest("--collect-only", "-q", "-m", "cuda", "-p", "no:graphsafe")
    result.stdout.fnmatch_lines(["*test_on?cuda?", "1/2 tests collected (1 deselected)*"])

"""The documentation states what the product does now: no issue or commit is cited, and a measured figure
stands beside the committed result file it comes from, with that file's date.

Scope: README.md, CONTRIBUTING.md, every page under docs/ but the changelog (history lives in CHANGELOG.md),
the text the Benchmarks page generates from benchmarks/results/, and the docstrings of graphsafe/.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.name != "changelog.md" and "_build" not in p.parts),
]
MODULES = sorted((ROOT / "graphsafe").rglob("*.py"))

# "issue 27", "issues 12 and 13": a reference to this project's tracker
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
# "#38", "PR #5": a tracker number; allowed only beside the name of the other project whose public report it is
HASH_NUMBER = re.compile(r"(?<![\w&])(?:(?:PR|pull request)\s+)?#\d+\b")
UPSTREAM = re.compile(
    r"\b(?:vLLM|SGLang|TensorRT-LLM|FlashInfer|FlashAttention|Megatron-LM|ROCm|DeepGEMM|PyTorch|kekzl|spiriMirror|"
    r"vcruz305)\b"
)
UPSTREAM_CITATIONS = {ROOT / "docs" / "explanation" / "hazards.md"}  # the page of other projects' reports
# 7 to 40 hex digits, at least one a-f and one digit, not part of a longer word, a path or a report's folder
# name (kind-1a2b3c4d) and not a 0x literal
COMMIT = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])")
# a measured figure: a number with a unit of time, size, speed-up or share, or steps per second
FIGURE = re.compile(
    r"(?<![\w.])(?!0x)\d+(?:\.\d+)?(?:\s?(?:-|to)\s?\d+(?:\.\d+)?)?\s?"
    r"(?:s|ms|us|µs|min|minutes|seconds|hours|x|%|[KMG]i?B|steps/s|steps per second)(?![\w/])(?! HBM)"
)
# settings and limits, not measurements: each is a default or a size the code or a command sets
SETTINGS = {
    "600 s",  # the default per-target timeout (graphsafe/checker/api.py)
    "30 s",  # the default step timeout under isolation (graphsafe/checker/api.py)
    "20 s",  # the floor of the hang timeout of a replay under isolation (graphsafe.engines.replay_clock)
    "20.0 s",  # the same floor, as an error message prints it
    "50 x",  # the hang timeout's multiple of the longest replay before it
    "1 MiB",  # the smallest allocation the capture-pool check counts
    "3 seconds",  # how long a check runs before its progress line shows (graphsafe/frontend/console.py)
    "20 minutes",  # CI's stated budget (CONTRIBUTING.md)
}
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def _blocks(text: str) -> list[str]:
    """The prose paragraphs and tables of a Markdown page, without fenced code (example output)."""
    out: list[str] = []
    para: list[str] = []
    fenced = False
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced or line.lstrip().startswith(("```", "~~~")) or not line.strip():
            if para:
                out.append("\n".join(para))
            para = []
        else:
            para.append(line)
    return out


def _sources(block: str) -> tuple[set[str], bool]:
    """The result files a block names, and whether it gives a date."""
    names = {m for m in re.findall(r"[\w.-]+\.(?:json|txt)", block) if (RESULTS / m).exists()}
    return names, bool(DATE.search(block))


def _docstrings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((getattr(node, "lineno", 1), doc))
    return out


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_a_page_cites_no_issue_or_pull_request(page):
    found = []
    for block in _blocks(page.read_text()):
        found += ISSUE.findall(block)
        if page not in UPSTREAM_CITATIONS and not UPSTREAM.search(block):
            found += HASH_NUMBER.findall(block)
    assert not found, f"{_rel(page)} cites {found}: say what the product does; history goes to CHANGELOG.md"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_a_page_cites_no_commit(page):
    found = [m for b in _blocks(page.read_text()) for m in COMMIT.findall(b)]
    assert not found, f"{_rel(page)} cites commits {found}: name the release or the result file instead"


def _sections(text: str) -> list[str]:
    """A Markdown page cut at its headings (a line starting with # inside fenced code is no heading)."""
    out: list[list[str]] = [[]]
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            out.append([])
        out[-1].append(line)
    return ["\n".join(lines) for lines in out]


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_a_measured_figure_names_its_result_file_and_date(page):
    bare = []
    for section in _sections(page.read_text()):
        if "{graphsafe-results}" in section:  # the section shows its result files, generated with machine and date
            continue
        sourced = False  # a block of this section so far named a result file and its date
        for block in _blocks(section):
            figures = [f for f in FIGURE.findall(block) if f not in SETTINGS]
            names, dated = _sources(block)
            sourced = sourced or bool(names and dated)
            if figures and not sourced:
                bare.append((figures[:4], block[:90].replace("\n", " ")))
    assert not bare, (
        f"{_rel(page)}: figures without the result file of benchmarks/results and its date beside them "
        f"(quote them with both, or show the file with a graphsafe-results directive): {bare}"
    )


@pytest.mark.parametrize("module", MODULES, ids=_rel)
def test_a_docstring_cites_no_issue_commit_or_timing(module):
    bad = []
    for line, doc in _docstrings(module):
        tracker = HASH_NUMBER.findall(doc) if not UPSTREAM.search(doc) else []
        bad += [(line, m) for m in ISSUE.findall(doc) + tracker + COMMIT.findall(doc)]
        bad += [(line, f) for f in FIGURE.findall(doc) if f not in SETTINGS and not _sources(doc)[0]]
    assert not bad, f"{_rel(module)}: {bad}: keep the reason, cite the benchmark script or result file"


def _results_tables():
    path = ROOT / "benchmarks" / "results_tables.py"
    spec = importlib.util.spec_from_file_location("results_tables", path)  # benchmarks/ is not a package
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_tables"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_generated_benchmarks_page_cites_no_issue_or_commit():
    rt = _results_tables()
    bad = []
    for path in rt.result_files():
        text = [*rt.provenance(rt.load(path), commit=False).values()]
        for table in rt.tables_of(path):
            text += [*table.lines, *table.header, *(cell for row in table.rows for cell in row)]
        joined = "\n".join(str(t) for t in text)
        found = ISSUE.findall(joined) + HASH_NUMBER.findall(joined) + COMMIT.findall(joined)
        if found:
            bad.append((path.name, found))
    assert not bad, f"result files whose generated text cites issues or commits: {bad}"


def test_the_rules_catch_what_they_forbid():
    assert ISSUE.findall("every figure meets issue 27's goals")
    assert HASH_NUMBER.findall("fixed in #38")
    assert UPSTREAM.search("the same bug as vLLM #42885")
    assert COMMIT.findall("commit 44f34f1 (uncommitted changes)")
    assert not COMMIT.findall("reports/scale/stale-pointer-f9927bd1 and 0x7f3a2b1c9d")
    assert FIGURE.findall("a check runs in 0.5 to 2.6 s, 1.7x faster")
    assert not FIGURE.findall("an address 0x7f3a and a GPU named NVIDIA H100 80GB HBM3")
    block = "It took 42.8 s against 51.2 s (`scaling-4gpu-50ex-cli-gpu.json`, 4x H100, 2026-11-28)."
    assert _sources(block) == ({"scaling-4gpu-50ex-cli-gpu.json"}, True)
    assert _sources("It took 42.8 s on an H100.") == (set(), False)
    assert _blocks("one\n\n```\n4.2 s of output\n```\ntwo") == ["one", "two"]
    assert len(_sections("# A\ntext\n## B\nmore\n```\n# a comment in code, no heading\n```")) == 3


def test_the_finding_kinds_table_keeps_each_cell_short():
    """The table of kinds is read at a glance; how each kind is proved goes in the sections below it."""
    text = (ROOT / "docs" / "explanation" / "finding-kinds.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    long = [cell.strip()[:60] for row in rows for cell in row.strip("|").split("|") if len(cell.strip()) > 300]
    assert rows and not long, f"cells over 300 characters: {long}"

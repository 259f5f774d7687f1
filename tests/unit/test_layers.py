"""The package's layers import one way, and a function-level import says why it is one.

Layers, top to bottom (docs/explanation/architecture.md): the facade ``graphsafe/__init__``, ``frontend``,
``guard``, ``reports``, ``checker``, ``diagnosis``, ``capture``, ``reference``, ``flashinfer``, ``vllm`` and ``sglang``, ``engines`` and ``strategies``,
then the base modules (``contract``, ``findings``, ``errors``, ``values``).  An import from a lower
layer to a higher one is allowed only with a ``# layer:`` comment on its line saying why, and at
most two such imports exist.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS = {  # higher number = higher layer
    "graphsafe": 9,
    "graphsafe.__main__": 9,
    "graphsafe.frontend": 8,
    "graphsafe.reports": 7,
    "graphsafe.guard": 7.5,  # the runtime guard writes reports; only the facade imports it
    "graphsafe.checker": 6,
    "graphsafe.diagnosis": 5,
    "graphsafe.capture": 4,
    "graphsafe.reference": 4,
    "graphsafe.flashinfer": 4,
    "graphsafe.vllm": 4,
    "graphsafe.sglang": 4,
    "graphsafe.engines": 3,
    "graphsafe.strategies": 3,
    "graphsafe.contract": 1,
    "graphsafe.findings": 1,
    "graphsafe.errors": 1,
    "graphsafe.values": 1,
    "graphsafe._version": 1,
    "graphsafe.defaults": 1,
    "graphsafe.family": 1,
}
MAX_UPWARD = 2


def layer(module: str) -> int | None:
    while module:
        if module in LAYERS:
            return LAYERS[module]
        module = module.rpartition(".")[0]
    return None


def modules() -> dict[str, Path]:
    out = {}
    for pkg in ("graphsafe",):
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function?) for every graphsafe/strategies import of the module."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")
                    up = up[: len(up) - (child.level - 1)] if child.level > 1 else up
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in child.names]
                found.extend(
                    (t if layer(t) is not None and t in MODULES else base, child.lineno, in_function) for t in targets
                )
            visit(child, inner)

    visit(tree, False)
    return [(m, line, fn) for m, line, fn in found if m.split(".")[0] == "graphsafe"]


MODULES = modules()


def test_every_module_belongs_to_a_layer():
    assert [m for m in MODULES if layer(m) is None] == []


def test_imports_go_down_the_layers_but_for_at_most_two_explained_exceptions():
    upward, unexplained = [], []
    for name, path in MODULES.items():
        lines = path.read_text().splitlines()
        for target, line, _ in imports(name, path):
            if layer(target) > layer(name):
                upward.append(f"{name} -> {target} (line {line})")
                if "# layer:" not in lines[line - 1]:
                    unexplained.append(upward[-1])
    assert unexplained == []
    assert len(upward) <= MAX_UPWARD, upward


def _explained(lines: list[str], lineno: int) -> bool:
    """A comment on the import's line, or on the line above its run of import lines."""
    i = lineno - 1
    if "#" in lines[i]:
        return True
    while i > 0 and lines[i - 1].strip().startswith(("import ", "from ")):
        i -= 1
    return i > 0 and "#" in lines[i - 1]


def test_a_function_level_import_says_why():
    silent = []
    for path in MODULES.values():
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                silent += [
                    f"{path.relative_to(ROOT)}:{node.lineno}"
                    for node in ast.walk(fn)
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and not _explained(lines, node.lineno)
                ]
    assert silent == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_450_lines(module):
    assert len(MODULES[module].read_text().splitlines()) <= 450

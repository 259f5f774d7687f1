"""``import graphsafe`` is cheap (each public name imports its module on first use) and every public name works."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import graphsafe
from tests.subprocesses import env_with_repo


def _fresh(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env_with_repo(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_every_public_name_resolves():
    for name in graphsafe.__all__:
        assert getattr(graphsafe, name) is not None, name
    assert set(graphsafe.__all__) <= set(dir(graphsafe))


def test_an_unknown_name_is_an_attribute_error():
    try:
        graphsafe.chek  # noqa: B018
    except AttributeError as e:
        assert "has no attribute 'chek'" in str(e)
    else:
        raise AssertionError("graphsafe.chek did not raise AttributeError")


def test_importing_graphsafe_imports_neither_torch_nor_triton():
    assert _fresh("import sys, graphsafe; print('torch' in sys.modules, 'triton' in sys.modules)") == "False False"


def test_from_graphsafe_import_a_name_imports_its_module():
    assert _fresh("from graphsafe import check, Batch, UsageError; print(check.__module__, Batch.__name__)") == (
        "graphsafe.frontend.runner Batch"
    )


def test_the_check_package_import_leaves_graphsafe_check_the_function():
    out = _fresh(
        "import graphsafe.checker.api, graphsafe; print(callable(graphsafe.check), "
        "graphsafe.check.__module__, graphsafe.checker.api.__name__)"
    )
    assert out == "True graphsafe.frontend.runner graphsafe.checker.api"


def _type_checking_imports() -> dict[str, str]:
    """name -> relative module, as the ``if TYPE_CHECKING:`` block of graphsafe/__init__.py imports them."""
    tree = ast.parse(Path(graphsafe.__file__).read_text())
    [block] = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    found: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            found[alias.asname or alias.name] = "." + (node.module or alias.name)
    return found


def test_the_type_checkers_view_names_each_public_name_from_the_module_it_lives_in():
    # with py.typed, installed users' type checkers and IDEs read this block: it must say what run time does
    mirror = _type_checking_imports()
    assert set(mirror) | {"__version__"} == set(graphsafe.__all__)
    assert mirror == graphsafe._HOMES

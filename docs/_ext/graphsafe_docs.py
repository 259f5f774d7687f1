"""Sphinx directives that generate reference pages from graphsafe's own code and result files.

* ``graphsafe-cli [SUBCOMMAND]``: the command line's options, from
  :func:`graphsafe.frontend.parser.build_parser` (the parser ``graphsafe`` itself runs);
* ``graphsafe-pytest-options``: the plugin's options and ini keys, from the ``addoption``/``addini``
  calls of :func:`graphsafe.frontend.plugin.pytest_addoption`;
* ``graphsafe-errors``: the error hierarchy of :mod:`graphsafe.errors`, with each class's exit code
  and pytest outcome;
* ``graphsafe-finding-kinds``: every :class:`graphsafe.FindingKind`, its stage and probe, what it
  means and how it is fixed (:mod:`graphsafe.findings`, :data:`graphsafe.PROBES`);
* ``graphsafe-targets GROUP``: the registered targets (``reference`` or ``flashinfer``) with their
  expected verdicts, as ``graphsafe list`` prints them;
* ``graphsafe-hazard-targets``: the hazard targets of ``tests/targets/hazards`` with their expected kinds
  and safe twins;
* ``graphsafe-bad-input``: every bad-input case of ``tests/integration/test_bad_input.py`` with the message
  graphsafe gives for it today (the cases run while the page is built);
* ``graphsafe-results FILE``: one file of ``benchmarks/results/`` (machine, date and tables,
  rendered by ``benchmarks/results_tables.py``).

When every page has been read, the build fails (a warning, and the build runs with ``-W``) if a name of
``graphsafe.__all__`` has no API entry, a subcommand of the parser or a result file is not shown, or a
finding kind has no stage.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # the repository's tests/ and benchmarks/

import results_tables  # noqa: E402  (benchmarks/ is not a package)

log = logging.getLogger(__name__)

#: finding kinds that no probe module makes, and where they come from
OTHER_KINDS = {
    "replay-mismatch": (
        "diagnosis",
        "graphsafe/diagnosis/loop.py",
        "graph and eager differ and no probe explains why",
    ),
    "target-error": ("any time", "graphsafe/checker/steps.py", "the target raised outside capture"),
    "support-mismatch": ("audit only", "graphsafe/checker/audit.py", "the declared Support level is not the safe one"),
}


# -- docutils helpers --------------------------------------------------------------------------------

_INLINE = re.compile(r"(`[^`]+`|\*\*[^*]+\*\*)")


def inline(text: str) -> list[nodes.Node]:
    """``text`` with ``code`` and **strong** spans as docutils nodes (nothing else is parsed)."""
    out: list[nodes.Node] = []
    for part in _INLINE.split(text):
        if not part:
            continue
        if part.startswith("`"):
            out.append(nodes.literal(part[1:-1], part[1:-1]))
        elif part.startswith("**"):
            out.append(nodes.strong(part[2:-2], part[2:-2]))
        else:
            out.append(nodes.Text(part))
    return out


def paragraph(text: str) -> nodes.paragraph:
    p = nodes.paragraph()
    p += inline(text)
    return p


def _widths(header: list[str], rows: list[list[str]]) -> list[int]:
    """Column widths from the cells' lengths (a long cell wraps; short ones keep room for a word or two)."""
    widths = []
    for i, head in enumerate(header):
        longest = max([len(head), *(len(r[i]) for r in rows if i < len(r))])
        widths.append(min(max(longest, 8), 60))
    return widths


def table(header: list[str], rows: list[list[str]], caption: str | None = None) -> nodes.table:
    t = nodes.table(classes=["graphsafe-generated", "colwidths-given"])
    if caption:
        title = nodes.title()
        title += inline(caption)
        t += title
    group = nodes.tgroup(cols=len(header))
    t += group
    for width in _widths(header, rows):
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    body = nodes.tbody()
    group += body
    for cells, parent in [(header, head), *[(r, body) for r in rows]]:
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += paragraph(cell)
            row += entry
        parent += row
    return t


def _seen(env: Any, key: str) -> set[str]:
    if not hasattr(env, "graphsafe_seen"):
        env.graphsafe_seen = {}
    return env.graphsafe_seen.setdefault(key, set())


# -- the command line --------------------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            flags = ", ".join(f"`{s}`" for s in action.option_strings)
            if isinstance(action, argparse.BooleanOptionalAction):
                flags = ", ".join(f"`{s}`" for s in action.option_strings)
            arg = "" if action.nargs == 0 else f"`{action.metavar or action.dest.upper()}`"
        else:
            flags = f"`{action.metavar or action.dest}`" + (" ..." if action.nargs in ("+", "*") else "")
            arg = "positional"
        rows.append([flags, arg, action.help or ""])
    return rows


class CliDirective(SphinxDirective):
    """The options of ``graphsafe [SUBCOMMAND]``, from the parser the command runs."""

    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        from graphsafe.frontend.parser import build_parser

        parser = build_parser()
        name = self.arguments[0] if self.arguments else ""
        if name:
            subs = _subparsers(parser)
            if name not in subs:
                raise self.error(f"graphsafe has no subcommand {name!r}; it has {', '.join(subs)}")
            parser = subs[name]
        _seen(self.env, "cli").add(name)
        old = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "100"  # argparse wraps the usage to the terminal's width: the page's, here
        try:
            usage = parser.format_usage().strip()
        finally:
            if old is None:
                del os.environ["COLUMNS"]
            else:
                os.environ["COLUMNS"] = old
        out: list[nodes.Node] = [nodes.literal_block(usage, usage, language="text")]
        if parser.description:
            out.append(paragraph(parser.description))
        rows = _option_rows(parser)
        if rows:
            out.append(table(["option", "argument", "meaning"], rows))
        return out


# -- the pytest plugin -------------------------------------------------------------------------------


class _Recorder:
    """Stands in for pytest's parser and option group: records what the plugin declares."""

    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.ini: list[tuple[str, str, dict[str, Any]]] = []

    def getgroup(self, name: str, description: str = "") -> _Recorder:
        return self

    def addoption(self, *flags: str, **kwargs: Any) -> None:
        self.options.append((flags, kwargs))

    def addini(self, name: str, help: str, **kwargs: Any) -> None:
        self.ini.append((name, help, kwargs))


class PytestOptionsDirective(SphinxDirective):
    """The plugin's command-line options and ini keys, from its ``pytest_addoption``."""

    def run(self) -> list[nodes.Node]:
        from graphsafe.frontend import plugin

        rec = _Recorder()
        plugin.pytest_addoption(rec)  # type: ignore[arg-type]
        ini = {name: (help, kw) for name, help, kw in rec.ini}
        rows = []
        for flags, kw in rec.options:
            dest = kw.get("dest", "")
            key = dest if dest in ini else ""
            arg = "" if kw.get("action") in ("store_true", "store_false") else f"`{kw.get('metavar', '')}`"
            if kw.get("action") == "append":
                arg += " (repeatable)"
            rows.append([", ".join(f"`{f}`" for f in flags), arg, f"`{key}`" if key else "-", kw.get("help", "")])
        _seen(self.env, "pytest").add("options")
        out: list[nodes.Node] = [table(["option", "argument", "ini key", "meaning"], rows)]
        documented = {r[2].strip("`") for r in rows}
        extra = [
            [f"`{name}`", kw.get("type") or "string", help]
            for name, (help, kw) in ini.items()
            if name not in documented
        ]
        if extra:
            out.append(paragraph("Ini keys without an option of the same name:"))
            out.append(table(["ini key", "type", "meaning"], extra))
        return out


# -- errors and exit codes ---------------------------------------------------------------------------


def _error_classes() -> list[tuple[str, type]]:
    """Every class of graphsafe.errors under GraphsafeError, depth first, each with its tree-drawing prefix."""
    from graphsafe import errors

    order = {name: i for i, name in enumerate(errors.__all__)}
    out: list[tuple[str, type]] = []

    def walk(cls: type, prefix: str, last: bool, root: bool) -> None:
        out.append(("" if root else prefix + ("└── " if last else "├── "), cls))
        subs = [c for c in cls.__subclasses__() if c.__module__ == errors.__name__]
        subs.sort(key=lambda c: order.get(c.__name__, len(order)))
        inner = "" if root else prefix + ("    " if last else "│   ")
        for i, sub in enumerate(subs):
            walk(sub, inner, i == len(subs) - 1, False)

    walk(errors.GraphsafeError, "", True, True)
    return out


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")


class ErrorsDirective(SphinxDirective):
    """The error hierarchy as a tree, then a table: class, exit code, pytest outcome, meaning."""

    def run(self) -> list[nodes.Node]:
        classes = _error_classes()
        lines = []
        for prefix, cls in classes:
            std = [b.__name__ for b in cls.__bases__ if b.__module__ == "builtins" and b is not Exception]
            label = cls.__name__ + (f" ({', '.join(std)})" if std else "")
            lines.append(f"{prefix}{label}".ljust(36) + f"exit {cls.exit_code}")
        tree = "\n".join(lines)
        rows = [[f"`{cls.__name__}`", str(cls.exit_code), cls.pytest_outcome, _first_line(cls)] for _, cls in classes]
        _seen(self.env, "errors").add("tree")
        return [
            nodes.literal_block(tree, tree, language="text"),
            table(["class", "exit code", "pytest outcome", "meaning"], rows),
        ]


# -- finding kinds -----------------------------------------------------------------------------------


class FindingKindsDirective(SphinxDirective):
    """Every finding kind: stage, where it is decided, what it means, how it is fixed."""

    def run(self) -> list[nodes.Node]:
        from graphsafe.diagnosis import PROBES
        from graphsafe.findings import EXPLANATIONS, FIXES, FindingKind

        rows = []
        for kind in FindingKind:
            probe = PROBES.get(kind.value)
            if probe is not None:
                module = inspect.getmodule(probe.run)
                where = "graphsafe/" + module.__name__.split("graphsafe.", 1)[1].replace(".", "/") + ".py"
                stage = probe.stage
            elif kind.value in OTHER_KINDS:
                stage, where, _ = OTHER_KINDS[kind.value]
            else:
                log.warning(
                    f"finding kind {kind.value!r} has no probe and no entry in OTHER_KINDS",
                    location=self.get_location(),
                )
                stage, where = "?", "?"
            rows.append([f"`{kind.value}`", stage, f"`{where}`", EXPLANATIONS.get(kind, ""), FIXES.get(kind, "")])
        return [table(["kind", "stage", "decided in", "meaning", "fix"], rows)]


# -- registered targets ------------------------------------------------------------------------------


class TargetsDirective(SphinxDirective):
    """The registered targets of a group (``reference`` or ``flashinfer``), as ``graphsafe list`` shows them."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from graphsafe.checker import expand, lookup, names
        from graphsafe.frontend.cli import first_sentence

        group = self.arguments[0]
        if group not in ("reference", "flashinfer"):
            raise self.error(f"unknown target group {group!r}: reference or flashinfer")
        rows = []
        for name in names() if group == "reference" else expand("flashinfer"):
            cls = lookup(name)
            expected = getattr(cls, "expected", None)
            support = getattr(getattr(cls, "support", None), "name", "").lower().replace("_", " ")
            rows.append(
                [f"`{name}`", f"`{getattr(expected, 'value', expected) or 'none'}`", support, first_sentence(cls)]
            )
        return [table(["name", "expected", "support", "what it is"], rows)]


class HazardTargetsDirective(SphinxDirective):
    """The hazard targets: module, buggy class, expected kinds, the mistake, the safe twin."""

    def run(self) -> list[nodes.Node]:
        from graphsafe.frontend.cli import first_sentence
        from tests.targets import hazards

        rows = []
        for cls, kinds in hazards.EXPECTED.items():
            module, name = hazards.label(cls).split(":")
            mistake = re.sub(r"^Buggy( \([^)]*\))?: ", "", first_sentence(cls))
            twin = hazards.TWIN_OF[cls]
            twin_name = twin.__name__ if twin.__module__ == cls.__module__ else hazards.label(twin).replace(":", ".")
            rows.append(
                [f"`{module}`", f"`{name}`", ", ".join(f"`{k}`" for k in sorted(kinds)), mistake, f"`{twin_name}`"]
            )
        return [table(["module", "buggy class", "expected", "mistake", "safe twin"], rows)]


class BadInputDirective(SphinxDirective):
    """Each bad-input case of the tests with the message graphsafe gives for it (run while building)."""

    def run(self) -> list[nodes.Node]:
        from tests.integration import test_bad_input

        rows = []
        for case in test_bad_input.API_CASES:
            try:
                case.call()
                message = "(no error)"
                log.warning(f"bad input {case.label!r} raised nothing", location=self.get_location())
            except Exception as e:  # noqa: BLE001 - the message is what this table shows
                message = f"{type(e).__name__}: {e}"
            rows.append([case.label.replace("`", "") if case.label.count("`") % 2 else case.label, f"`{message}`"])
        return [table(["bad input", "message"], rows)]


# -- benchmark results -------------------------------------------------------------------------------


class ResultsDirective(SphinxDirective):
    """One result file of benchmarks/results: where and when it was measured, then its tables."""

    required_arguments = 1
    option_spec = {"captions": directives.flag}

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        path = results_tables.RESULTS / name
        if not path.exists():
            raise self.error(f"benchmarks/results/{name} does not exist")
        self.env.note_dependency(str(path))
        _seen(self.env, "results").add(name)
        prov = results_tables.provenance(results_tables.load(path), commit=False)
        out: list[nodes.Node] = [
            paragraph(f"`{name}`: " + "; ".join(f"{k} {v}" for k, v in prov.items()) + "."),
        ]
        for t in results_tables.tables_of(path):
            out += [paragraph(line) for line in t.lines]
            out.append(table(t.header, t.rows, caption=t.caption if "captions" in self.options else None))
        return out


# -- the checks once every page is read ---------------------------------------------------------------


def _merge(app: Sphinx, env: Any, docnames: set[str], other: Any) -> None:
    for key, values in getattr(other, "graphsafe_seen", {}).items():
        _seen(env, key).update(values)


def _purge(app: Sphinx, env: Any, docname: str) -> None:
    pass  # the sets only grow; a full build (make docs) starts from none


def _check(app: Sphinx, env: Any) -> None:
    import graphsafe
    from graphsafe.frontend.parser import build_parser

    py = env.get_domain("py")
    documented = set(py.objects) | set(py.modules)
    for name in graphsafe.__all__:
        if f"graphsafe.{name}" not in documented:
            log.warning(f"graphsafe.{name} (in graphsafe.__all__) has no entry in the API reference")
    seen = getattr(env, "graphsafe_seen", {})
    for sub in ["", *_subparsers(build_parser())]:
        if sub not in seen.get("cli", set()):
            log.warning(f"the command-line reference does not show 'graphsafe {sub}'".replace(" '", "'", 0))
    for key, what in (("pytest", "the pytest plugin's options"), ("errors", "the error hierarchy")):
        if not seen.get(key):
            log.warning(f"no page shows {what} (the {key} directive)")
    shown = seen.get("results", set())
    for path in results_tables.result_files():
        if path.name not in shown:
            log.warning(f"benchmarks/results/{path.name} is not shown on the Benchmarks page")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("graphsafe-cli", CliDirective)
    app.add_directive("graphsafe-pytest-options", PytestOptionsDirective)
    app.add_directive("graphsafe-errors", ErrorsDirective)
    app.add_directive("graphsafe-finding-kinds", FindingKindsDirective)
    app.add_directive("graphsafe-targets", TargetsDirective)
    app.add_directive("graphsafe-hazard-targets", HazardTargetsDirective)
    app.add_directive("graphsafe-bad-input", BadInputDirective)
    app.add_directive("graphsafe-results", ResultsDirective)
    app.connect("env-merge-info", _merge)
    app.connect("env-purge-doc", _purge)
    app.connect("env-check-consistency", _check)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

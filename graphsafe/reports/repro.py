"""``repro.py``: a standalone script that replays one finding, and ``graphsafe repro DIR``.

The *recipe* is everything a replay needs, as plain JSON: the target's name,
engine, capture spec, the shrunk steps, and how to capture.  ``repro.py``
embeds it as a JSON literal and imports its logic from
:mod:`graphsafe.reports._script`; :func:`repro_main` rebuilds the same recipe
from ``finding.json`` and runs the same logic in-process.

How the capture is rebuilt:

* a *drawn* capture (the capture batch is not the spec's worst case at its
  size) passes ``capture_batch`` and ``capture_size`` to
  :func:`graphsafe.reproduce`, which captures that one graph;
* otherwise ``capture_sizes`` is passed: the sizes the check captured
  (``finding.details["capture_sizes"]`` when the checker recorded them, else
  ``spec.default_capture_sizes()``), each with the worst-case batch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .._version import __version__
from ..contract import CAPTURE_SEED, Batch
from ..defaults import TIMEOUT_S
from ..findings import Finding
from . import _script, jsonio

__all__ = ["import_hints", "capture_plan", "recipe_from_data", "render_script", "repro_main", "SCRIPT_NAME"]

SCRIPT_NAME = "repro.py"


# -- facts recorded at write time -------------------------------------------------------------
def import_hints(target: str) -> dict[str, str | None]:
    """Where the target's module imports from (``import_root``), and its file if it lives in ``__main__``."""
    hints: dict[str, str | None] = {"import_root": None, "target_file": None}
    if ":" not in target:
        return hints
    mod_name = target.split(":", 1)[0]
    mod = sys.modules.get(mod_name)
    file = getattr(mod, "__file__", None) if mod is not None else None
    if not file:
        return hints
    file = os.path.abspath(file)
    if mod_name == "__main__":
        hints["target_file"] = file
        hints["import_root"] = os.path.dirname(file)
        return hints
    levels = mod_name.count(".") + 1 + (1 if os.path.basename(file).startswith("__init__.") else 0)
    root = file
    for _ in range(levels):
        root = os.path.dirname(root)
    hints["import_root"] = root
    return hints


def capture_plan(f: Finding) -> dict[str, Any]:
    """``capture_is_worst_case`` (None when unknown) and the ``capture_sizes`` the check captured."""
    sizes = f.details.get("capture_sizes")
    if sizes is None and f.spec is not None:
        sizes = list(f.spec.default_capture_sizes())
        source = "spec.default_capture_sizes()"
    else:
        source = "finding.details" if sizes is not None else "unknown"
    worst: bool | None = None
    if "capture_policy" in f.details:
        worst = f.details["capture_policy"] in ("worst", "ascending")
    elif "drawn_capture" in f.details:
        worst = not bool(f.details["drawn_capture"])
    elif f.capture_batch is not None and f.spec is not None:
        size = f.capture_size or f.capture_batch.num_slots
        seed = CAPTURE_SEED
        worst = False
        for q in sorted({1, f.spec.max_query_len}):
            try:
                if f.spec.worst_case_batch(size, query_len=q, seed=seed).padded(size) == f.capture_batch:
                    worst = True
            except ValueError:
                pass
    return {"capture_is_worst_case": worst, "capture_sizes": list(sizes or []), "capture_sizes_source": source}


# -- the recipe -------------------------------------------------------------------------------
#: capture policies a repro can rebuild by name (a drawn one travels as its batch, a function not at all)
_REBUILDABLE = ("worst", "ascending", "minimal")


def _probes_for(kind: str, probe: str) -> list[str] | None:
    return None  # every probe, as the check used: a finding is attributed among all of them


def recipe_from_data(data: dict[str, Any]) -> dict[str, Any]:
    """The replay recipe for the data of a ``finding.json`` (plain JSON, no floats but tolerances)."""
    details = data.get("details") or {}
    policy = details.get("capture_policy")
    rebuild = policy if policy in _REBUILDABLE else None
    # a capture no policy name rebuilds (drawn, or the engine's own function) travels as its batch
    drawn = rebuild is None and data.get("capture_is_worst_case") is False and data.get("capture_batch") is not None
    options = {k: details[k] for k in ("rtol", "atol", "bitwise") if details.get(k) is not None}
    hints = data.get("target_import") or {}
    return {
        "kind": data["kind"],
        "target": data["target"],
        "where": data.get("where", ""),
        "engine": data.get("engine") or "auto",
        "spec": data.get("spec"),
        "steps": list(data.get("batches") or []),
        "failing_step": data.get("step", -1),
        "capture_batch": data["capture_batch"] if drawn else None,
        "capture": rebuild,
        "capture_size": int(data.get("capture_size") or 0) or None,
        "capture_sizes": list(data.get("capture_sizes") or []),
        "probes": _probes_for(data["kind"], data.get("probe") or ""),
        "examples": int(details.get("examples") or 0) or None,
        "options": options,
        "import_root": hints.get("import_root"),
        "target_file": hints.get("target_file"),
    }


# -- the script -------------------------------------------------------------------------------
def _comment(text: str) -> str:
    return "\n".join(("# " + line).rstrip() for line in text.splitlines())


def render_script(recipe: dict[str, Any], *, message: str = "", report_dir: str = "") -> str:
    """The text of ``repro.py`` for ``recipe``."""
    # ASCII JSON inside r"""...""", the quotes that formatters (ruff, black) keep, so that formatting a
    # project leaves its reports alone: JSON escapes every quote inside a string, so no three quotes meet;
    # single quotes are escaped as well
    literal = jsonio.pretty(jsonio.plain(recipe), ensure_ascii=True).replace("'", "\\u0027")
    steps = [Batch.from_dict(b).short() for b in recipe["steps"]]
    step_lines = (
        "\n".join(
            f"  step {i}: {s}" + ("   <- fails" if i == recipe.get("failing_step") else "") for i, s in enumerate(steps)
        )
        or "  (none: the finding arises at capture)"
    )
    script = os.path.join(report_dir, SCRIPT_NAME) if report_dir else SCRIPT_NAME
    head = f"""Reproduce a graphsafe finding: {recipe["kind"]} in {recipe["target"]}
at: {recipe.get("where") or "-"}
{message.strip().splitlines()[0] if message.strip() else ""}

steps (shrunk):
{step_lines}

Run from the project root, so that the target imports:

    python {script}                    (engine {recipe["engine"]!r}, as found)
    python {script} --engine emulate   (on the CPU emulator)
    graphsafe repro {report_dir or "<report dir>"}

Exit status: 0 once fixed (the target runs every step, no finding left), 1 while
the {recipe["kind"]} finding reproduces, 2 if the repro cannot run (the target does
not load), 3 if the target raises, crashes or hangs.  The recipe is plain JSON (no
pickles); to keep this as a regression test, import this file and assert
run_recipe(RECIPE) == 0.

Written by graphsafe {__version__}."""
    return (
        "#!/usr/bin/env python3\n"
        + _comment(head)
        + "\nimport json\nimport sys\n\n"
        + "# the replay logic lives in graphsafe (one copy for every report): main, run_recipe\n"
        + "from graphsafe.reports._script import main, run_recipe  # noqa: F401\n\n"
        + f'RECIPE = json.loads(r"""\n{literal}\n""")\n'
        + '\n\nif __name__ == "__main__":\n    sys.exit(main(RECIPE))\n'
    )


# -- graphsafe repro DIR ----------------------------------------------------------------------
def repro_main(path: str | os.PathLike, engine: str | None = None, timeout: float = TIMEOUT_S) -> int:
    """Run the repro of the report at ``path`` (its directory, ``finding.json`` or ``repro.py``).

    Reads the recipe from ``finding.json`` (the same one ``repro.py`` embeds), replays it in a child
    process (:func:`graphsafe.reports._script.run_isolated`, killed after ``timeout`` seconds) and
    returns the exit status: 0 once fixed (the target ran every step and no finding is left), 1 while
    the finding's kind reproduces (or another finding shows), 2 if the report is unreadable or the
    target cannot be loaded, 3 if the target raises, crashes or hangs.  ``engine`` overrides the
    recorded engine (``"auto"``, ``"cuda"``, ``"emulate"``).
    """
    try:
        data = jsonio.read_data(path)
    except (OSError, ValueError) as e:
        print(f"graphsafe repro: {e}", file=sys.stderr)
        return _script.EXIT_CANNOT_RUN
    return _script.run_isolated(recipe_from_data(data), engine=engine, timeout=timeout)

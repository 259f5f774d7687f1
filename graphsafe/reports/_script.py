"""The logic of every report's ``repro.py``: the script holds its ``RECIPE`` and imports
``main``/``run_recipe`` from here (one copy for every report).

It uses the standard library and graphsafe's check layer (``reproduce``, ``CheckOptions``, ``Batch``,
``CaptureSpec``, ``Tolerance``): a repro replays one step sequence in this process, without search.
``graphsafe repro DIR`` (:func:`graphsafe.reports.repro_main`) runs the same
functions from this module on the recipe built from ``DIR/finding.json``.

Exit status: 1 while a finding of the recorded kind is reproduced, 0 once it
is gone (other findings are printed but do not count), 2 when the repro cannot
run at all (the target does not import, the engine is unavailable).
"""

import argparse
import importlib.util
import os
import sys
import traceback

from ..capture.compare import Tolerance
from ..checker import CheckOptions, reproduce
from ..contract import Batch, CaptureSpec

EXIT_FIXED, EXIT_REPRODUCED, EXIT_CANNOT_RUN = 0, 1, 2

# a replay after capture, for findings made at capture (no steps recorded): valid for any spec and Support
MINIMAL_STEP = {"query_lens": [1], "seq_lens": [1], "block_table": [[1]], "seed": 1, "num_slots": 1}


def resolve_recipe_target(recipe):
    """The target to pass to graphsafe: its recorded name, importable from the current directory.

    A target defined in a script (``__main__:Class``) is loaded from the
    recorded script file under another module name, so the script's
    ``if __name__ == "__main__":`` block does not run.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    root = recipe.get("import_root")
    if root and os.path.isdir(root) and root not in sys.path:
        sys.path.append(root)
    name = recipe["target"]
    path = recipe.get("target_file")
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if name.startswith("__main__:") and path and not (main_file and os.path.abspath(main_file) == path):
        if not os.path.exists(path):
            raise RuntimeError(f"target {name} was defined in the script {path}, which no longer exists")
        spec = importlib.util.spec_from_file_location("_graphsafe_repro_target", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        obj = module
        for part in name.split(":", 1)[1].split("."):
            obj = getattr(obj, part)
        return obj
    return name


def run_recipe(recipe, engine=None, out=None):
    """Rebuild the capture, replay the recorded steps, and return the exit status."""
    out = out if out is not None else sys.stdout
    kind = recipe["kind"]
    engine = engine or recipe.get("engine") or "auto"
    target = resolve_recipe_target(recipe)
    spec = CaptureSpec.from_dict(recipe["spec"]) if recipe.get("spec") else None
    tolerance = Tolerance(**dict(recipe.get("options") or {}))  # rtol, atol, bitwise as the check used them
    print(f"graphsafe repro: {kind} in {recipe['target']} on engine {engine!r}", file=out)
    steps = [Batch.from_dict(b) for b in recipe.get("steps") or []]
    if not steps:
        steps = [Batch.from_dict(MINIMAL_STEP)]
        print("  (the finding arose before any step; replaying one minimal batch after capture)", file=out)
    options = CheckOptions.build(spec=spec, engine=engine, probes=recipe.get("probes"), tolerance=tolerance,
                                 capture=recipe.get("capture"), capture_sizes=tuple(recipe.get("capture_sizes") or ()) or None)
    capture_batch = Batch.from_dict(recipe["capture_batch"]) if recipe.get("capture_batch") else None
    result = reproduce(target, steps, options, capture_batch=capture_batch,
                       capture_size=recipe.get("capture_size") or None if capture_batch is not None else None)
    print(result.summary(), file=out)
    same = [f for f in result.findings if str(f.kind) == kind and f.severity == "error"]
    if same:
        print(f"REPRODUCED: {kind} is still there (exit {EXIT_REPRODUCED})", file=out)
        return EXIT_REPRODUCED
    others = sorted({str(f.kind) for f in result.findings if f.severity == "error"})
    note = f"; other findings: {', '.join(others)}" if others else ""
    print(f"FIXED: no {kind} finding{note} (exit {EXIT_FIXED})", file=out)
    return EXIT_FIXED


def run_recipe_safely(recipe, engine=None, out=None):
    """:func:`run_recipe`, with any error of the repro itself reported and turned into exit status 2."""
    try:
        return run_recipe(recipe, engine=engine, out=out)
    except Exception:  # noqa: BLE001 - the target's own errors are findings; this is the repro failing
        traceback.print_exc()
        print(f"repro could not run (exit {EXIT_CANNOT_RUN}); try --engine emulate on a machine without a GPU",
              file=sys.stderr)
        return EXIT_CANNOT_RUN


def main(recipe, argv=None):
    parser = argparse.ArgumentParser(
        description=f"Reproduce the graphsafe finding {recipe['kind']} in {recipe['target']}. "
        "Exit status: 1 while it reproduces, 0 once fixed, 2 if the repro cannot run."
    )
    parser.add_argument(
        "--engine", choices=("auto", "cuda", "emulate"), default=None,
        help=f"engine to replay on (default: the one the finding was made on, {recipe.get('engine') or 'auto'})",
    )
    args = parser.parse_args(argv)
    return run_recipe_safely(recipe, engine=args.engine)

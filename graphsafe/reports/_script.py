"""The logic of every report's ``repro.py``: the script holds its ``RECIPE`` and imports
``main``/``run_recipe`` from here (one copy for every report).

It uses the standard library and graphsafe's check layer (``reproduce``, ``CheckOptions``, ``Batch``,
``CaptureSpec``, ``Tolerance``): a repro replays one step sequence, without search.
``graphsafe repro DIR`` (:func:`graphsafe.reports.repro_main`) runs the same functions from this
module on the recipe built from ``DIR/finding.json``.

:func:`main` (the script) and ``graphsafe repro`` replay in a child process (:func:`run_isolated`),
so that a target that crashes or hangs is reported as such; :func:`run_recipe` replays here.

Exit status (docs/reference/exit-codes.md):

* 0 (``FIXED``) only when the target ran every step and no error finding is left;
* 1 (``REPRODUCED``) while a finding of the recorded kind is reproduced; also 1 when it is not, but
  another finding is (the graph no longer captures, or another hazard shows on these steps);
* 2 when the repro cannot run: the report is unreadable, the target cannot be loaded (its module
  does not import, the class is gone), the engine is unavailable;
* 3 when the target itself failed to run: it raised (a ``target-error``), crashed its process or hung.
"""

import argparse
import faulthandler
import importlib.util
import json
import os
import signal
import subprocess
import sys
import traceback

from ..capture.compare import Tolerance
from ..checker import CheckOptions, reproduce
from ..contract import Batch, CaptureSpec
from ..defaults import TIMEOUT_S
from ..engines.triton_env import use_interpreter
from ..errors import GraphsafeError

EXIT_FIXED, EXIT_REPRODUCED, EXIT_CANNOT_RUN, EXIT_TARGET = 0, 1, 2, 3

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
        if spec is None or spec.loader is None:
            raise RuntimeError(f"target {name} was defined in the script {path}, which Python cannot load")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        obj = module
        for part in name.split(":", 1)[1].split("."):
            obj = getattr(obj, part)
        return obj
    return name


def replay(recipe, engine, target):
    """``graphsafe.reproduce`` of the recipe's steps on ``engine``: the CheckResult."""
    spec = CaptureSpec.from_dict(recipe["spec"]) if recipe.get("spec") else None
    tolerance = Tolerance(**dict(recipe.get("options") or {}))  # rtol, atol, bitwise as the check used them
    steps = [Batch.from_dict(b) for b in recipe.get("steps") or []] or [Batch.from_dict(MINIMAL_STEP)]
    options = CheckOptions.build(
        spec=spec,
        engine=engine,
        probes=recipe.get("probes"),
        tolerance=tolerance,
        capture=recipe.get("capture"),
        capture_sizes=tuple(recipe.get("capture_sizes") or ()) or None,
    )
    capture_batch = Batch.from_dict(recipe["capture_batch"]) if recipe.get("capture_batch") else None
    return reproduce(
        target,
        steps,
        options,
        capture_batch=capture_batch,
        capture_size=recipe.get("capture_size") or None if capture_batch is not None else None,
    )


def _first_line(text):
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


def run_recipe(recipe, engine=None, out=None):
    """Rebuild the capture, replay the recorded steps here, and return the exit status (module docstring)."""
    out = out if out is not None else sys.stdout
    kind = recipe["kind"]
    engine = engine or recipe.get("engine") or "auto"
    print(f"graphsafe repro: {kind} in {recipe['target']} on engine {engine!r}", file=out)
    try:
        target = resolve_recipe_target(recipe)
    except Exception as e:  # noqa: BLE001 - whatever the target's file raises, the repro cannot start
        print(
            f"CANNOT LOAD: the target {recipe['target']} could not be loaded: {type(e).__name__}: "
            f"{_first_line(e)} (exit {EXIT_CANNOT_RUN})",
            file=out,
        )
        return EXIT_CANNOT_RUN
    if not recipe.get("steps"):
        print("  (the finding arose before any step; replaying one minimal batch after capture)", file=out)
    result = replay(recipe, engine, target)
    print(result.summary(), file=out)
    errors = [f for f in result.findings if f.severity == "error"]
    raised = [f for f in errors if str(f.kind) == "target-error"]
    if raised:
        why = _first_line(raised[0].message)
        if kind == "target-error":
            print(f"REPRODUCED: the target still raises ({why}) (exit {EXIT_TARGET})", file=out)
        else:
            print(
                f"TARGET ERROR: the target raised ({why}), so {kind} cannot be judged until it runs "
                f"(exit {EXIT_TARGET})",
                file=out,
            )
        return EXIT_TARGET
    if any(str(f.kind) == kind for f in errors):
        print(f"REPRODUCED: {kind} is still there (exit {EXIT_REPRODUCED})", file=out)
        return EXIT_REPRODUCED
    others = sorted({str(f.kind) for f in errors})
    if "capture-failure" in others:
        print(
            f"NOT JUDGED: the graph no longer captures (capture-failure), so {kind} cannot be judged "
            f"(exit {EXIT_REPRODUCED})",
            file=out,
        )
        return EXIT_REPRODUCED
    if others:
        print(f"NOT FIXED: no {kind} finding now, but {', '.join(others)} (exit {EXIT_REPRODUCED})", file=out)
        return EXIT_REPRODUCED
    print(f"FIXED: no {kind} finding, and the target ran every step (exit {EXIT_FIXED})", file=out)
    return EXIT_FIXED


def run_recipe_safely(recipe, engine=None, out=None):
    """:func:`run_recipe`, with an error of the repro itself reported and turned into its exit status:
    graphsafe's own errors by their class (a usage or contract error 2, a target failure 3), others 2."""
    out = out if out is not None else sys.stdout
    try:
        return run_recipe(recipe, engine=engine, out=out)
    except GraphsafeError as e:
        code = e.exit_code if e.exit_code in (EXIT_CANNOT_RUN, EXIT_TARGET) else EXIT_CANNOT_RUN
        verdict = "TARGET FAILED" if code == EXIT_TARGET else "CANNOT RUN"
        print(f"{verdict}: {_first_line(e)} (exit {code})", file=out)
        return code
    except Exception:  # noqa: BLE001 - the target's own errors are findings; this is the repro failing
        traceback.print_exc()
        print(
            f"CANNOT RUN: the repro could not run (exit {EXIT_CANNOT_RUN}); try --engine emulate on a machine "
            "without a GPU",
            file=out,
        )
        return EXIT_CANNOT_RUN


# -- in a child process ------------------------------------------------------------------------
_CHILD = "import sys; from graphsafe.reports._script import child_main; sys.exit(child_main())"


def child_main():
    """The child of :func:`run_isolated`: read the job from stdin, replay, exit with the status."""
    job = json.loads(sys.stdin.read())
    sys.path[:0] = [p for p in job["path"] if p not in sys.path]  # what the parent could import
    faulthandler.enable()  # a crash prints the target's Python stack before the process dies
    engine = job["engine"] or job["recipe"].get("engine") or "auto"
    # before triton is imported (nothing above imports it): the emulator needs Triton's interpreter
    if engine in ("emulate", "auto"):
        use_interpreter(force=True if engine == "emulate" else None)
    return run_recipe_safely(job["recipe"], engine=job["engine"])


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_isolated(recipe, engine=None, timeout=TIMEOUT_S, out=None):
    """:func:`run_recipe_safely` in a child Python process, killed after ``timeout`` seconds: a target
    that crashes the process or hangs is reported (exit 3) instead of taking the repro down with it."""
    out = out if out is not None else sys.stdout
    job = json.dumps({"recipe": recipe, "engine": engine, "path": [p for p in sys.path if p]})
    out.flush()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, start_new_session=True)
    try:
        proc.communicate(job.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(
            f"TIMEOUT: no result within {timeout:g} s: the target hangs (an endless kernel or a blocking call); "
            f"its process was killed (exit {EXIT_TARGET})",
            file=out,
        )
        return EXIT_TARGET
    except BaseException:  # Ctrl-C: the child goes too
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode < 0:
        print(
            f"CRASHED: the target crashed the repro's process ({_signal_name(-proc.returncode)}); its last "
            f"Python frames are above (exit {EXIT_TARGET})",
            file=out,
        )
        return EXIT_TARGET
    if proc.returncode in (EXIT_FIXED, EXIT_REPRODUCED, EXIT_CANNOT_RUN, EXIT_TARGET):
        return proc.returncode
    print(
        f"CRASHED: the repro's process exited with status {proc.returncode} without a verdict (exit {EXIT_TARGET})",
        file=out,
    )
    return EXIT_TARGET


def main(recipe, argv=None):
    parser = argparse.ArgumentParser(
        description=f"Reproduce the graphsafe finding {recipe['kind']} in {recipe['target']}. "
        "Exit status: 0 once fixed (the target ran every step, no finding left), 1 while it reproduces, "
        "2 if the repro cannot run (the target does not load), 3 if the target raises, crashes or hangs."
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "cuda", "emulate"),
        default=None,
        help=f"engine to replay on (default: the one the finding was made on, {recipe.get('engine') or 'auto'})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT_S,
        help=f"seconds before a hanging replay is stopped (default {TIMEOUT_S:g})",
    )
    args = parser.parse_args(argv)
    return run_isolated(recipe, engine=args.engine, timeout=args.timeout)

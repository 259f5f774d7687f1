"""What the pytest plugin and the command line share.

Option parsing (engines, capture sizes, probe lists, target lists), the
engine set-up that must happen before kernels are imported, graphsafe's
Hypothesis profiles, and :func:`run_check`: ``graphsafe.check`` with report
writing that tolerates two processes (pytest-xdist workers) writing the same
finding.

Nothing here imports a target; :func:`expand_targets` imports the registry
only for ``all``.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

__all__ = [
    "ENGINES",
    "PROFILES",
    "ConfigError",
    "parse_engine",
    "parse_int",
    "parse_sizes",
    "parse_probes",
    "parse_isolate",
    "parse_timeout",
    "ISOLATION",
    "uses_cuda",
    "expand_targets",
    "profile_name",
    "default_profile",
    "default_examples",
    "env_is_ci",
    "register_profiles",
    "hypothesis_profile",
    "cuda_available",
    "prepare_engine",
    "engine_problem",
    "contract_message",
    "one_line",
    "run_check",
    "write_reports",
    "failure_text",
]

ENGINES = ("auto", "cuda", "emulate")

#: where checks run: ``none`` in the calling process, ``target`` in one sandbox process per target
ISOLATION = ("none", "target")

#: seconds one isolated check may take before its process is killed
DEFAULT_TIMEOUT_S = 600.0

#: short name -> (Hypothesis profile, default number of examples)
PROFILES: dict[str, tuple[str, int]] = {
    "fast": ("graphsafe-fast", 10),
    "ci": ("graphsafe-ci", 25),
    "thorough": ("graphsafe-thorough", 200),
}


class ConfigError(ValueError):
    """A bad option value; the message is one line meant for the user."""


# -- parsing -----------------------------------------------------------------------------
def one_line(msg: Any) -> str:
    """Collapse a (possibly multi-line) message into one line."""
    return re.sub(r"\s*\n\s*", " ", str(msg)).strip()


def parse_engine(value: Any, where: str = "engine") -> str:
    v = str(value).strip().lower()
    if v not in ENGINES:
        raise ConfigError(f"{where}: unknown engine {value!r}; choose one of {', '.join(ENGINES)}")
    return v


def parse_int(value: Any, where: str, minimum: int = 1) -> int:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if n < minimum:
        raise ConfigError(f"{where}: must be >= {minimum}, got {n}")
    return n


def parse_isolate(value: Any, where: str = "isolate") -> str:
    v = str(value).strip().lower()
    if v not in ISOLATION:
        raise ConfigError(f"{where}: unknown isolation {value!r}; choose one of {', '.join(ISOLATION)}")
    return v


def parse_timeout(value: Any, where: str = "timeout") -> float:
    """Seconds, > 0 (``"90"``, ``"2.5"``)."""
    try:
        t = float(str(value).strip())
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected a number of seconds, got {value!r}") from None
    if not t > 0 or t != t or t == float("inf"):
        raise ConfigError(f"{where}: must be a number of seconds > 0, got {value!r}")
    return t


def _split(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    out: list[str] = []
    for v in value:
        out.extend(p.strip() for p in re.split(r"[,\s]+", str(v)) if p.strip())
    return out


def parse_sizes(value: Any, where: str = "capture sizes") -> tuple[int, ...] | None:
    """``"1,2,4"`` (or a list) -> ``(1, 2, 4)``, sorted and de-duplicated; empty -> ``None``."""
    parts = _split(value) if not isinstance(value, int) else [str(value)]
    if not parts:
        return None
    return tuple(sorted({parse_int(p, where) for p in parts}))


def parse_probes(value: Any, where: str = "probes") -> tuple[str, ...]:
    """Probe names from ``"p1,p2"`` or a list, in the given order; empty or ``all`` -> the defaults."""
    from ..probes import DEFAULT_PROBES, PROBES

    parts = _split(value)
    if not parts or parts == ["all"]:
        return tuple(DEFAULT_PROBES)
    out: list[str] = []
    for p in parts:
        if p == "all":
            out.extend(n for n in DEFAULT_PROBES if n not in out)
            continue
        if p not in PROBES:
            raise ConfigError(f"{where}: unknown probe {p!r}; known probes: {', '.join(PROBES)}")
        if p not in out:
            out.append(p)
    return tuple(out)


def expand_targets(values: Iterable[str]) -> list[str]:
    """Target names in the given order, de-duplicated; ``all`` expands to every registered name (sorted)."""
    out: list[str] = []
    for v in _split(list(values)):
        if v == "all":
            from ..registry import names

            new = names()
        else:
            new = [v]
        out.extend(n for n in new if n not in out)
    return out


# -- Hypothesis profiles -------------------------------------------------------------------
def env_is_ci() -> bool:
    """True when the ``CI`` environment variable is set to a true value."""
    v = os.environ.get("CI")
    return v is not None and v.strip().lower() not in ("", "0", "false", "no", "off")


def default_profile() -> str:
    return "ci" if env_is_ci() else "fast"


def profile_name(value: Any = None) -> str:
    """The Hypothesis profile for ``fast``/``ci``/``thorough`` (or ``graphsafe-...``); ``None``: by ``CI``."""
    if value is None or str(value).strip() == "":
        value = default_profile()
    v = str(value).strip().lower()
    if v.startswith("graphsafe-"):
        v = v[len("graphsafe-"):]
    if v not in PROFILES:
        raise ConfigError(f"profile: unknown profile {value!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[v][0]


def default_examples(profile: str) -> int:
    """Examples per check when none were asked for: the profile's (fast 10, ci 25, thorough 200)."""
    for full, n in PROFILES.values():
        if full == profile:
            return n
    return PROFILES["fast"][1]


def register_profiles() -> None:
    """Register ``graphsafe-fast``, ``graphsafe-ci`` and ``graphsafe-thorough`` (idempotent).

    They derive from Hypothesis' built-in ``default`` profile, not from
    whatever is loaded, so the same name means the same settings everywhere.
    """
    from hypothesis import settings

    base = settings.get_profile("default")
    settings.register_profile("graphsafe-fast", parent=base, max_examples=10, deadline=None)
    settings.register_profile(
        "graphsafe-ci", parent=base, max_examples=25, deadline=None, derandomize=True, database=None, print_blob=False
    )
    settings.register_profile("graphsafe-thorough", parent=base, max_examples=200, deadline=None)


@contextmanager
def hypothesis_profile(name: str) -> Iterator[None]:
    """Load a Hypothesis profile for the duration of one check, then put the previous one back.

    ``graphsafe.check`` derives its settings from ``settings.default``, so
    this is what makes the profile apply to graphsafe's checks only (and win
    over the ``ci`` profile Hypothesis loads by itself when ``CI`` is set).
    """
    from hypothesis import settings

    register_profiles()
    prev = settings.get_current_profile_name()
    settings.load_profile(name)
    try:
        yield
    finally:
        try:
            settings.load_profile(prev)
        except Exception:  # pragma: no cover - the previous profile vanished
            settings.load_profile("default")


# -- engines -------------------------------------------------------------------------------
def cuda_available() -> bool:
    """``torch.cuda.is_available()``, asked through NVML where torch can, so that this process
    does not initialise CUDA (pytest's process must stay safe to fork for the suites it runs)."""
    import torch

    if not torch.backends.cuda.is_built():
        return False
    key = "PYTORCH_NVML_BASED_CUDA_CHECK"
    prev = os.environ.get(key)
    os.environ[key] = "1"
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken driver means no CUDA here
        return False
    finally:
        if prev is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = prev


def prepare_engine(engine: str) -> bool:
    """Switch Triton to its interpreter when ``engine`` will be the emulator; call before kernels import.

    ``emulate`` always, ``auto`` when no CUDA device is visible, ``cuda`` never.
    Returns True when the interpreter is active.
    """
    from ..engines.triton_env import interpreter_active, use_interpreter

    if engine == "emulate" or interpreter_active() or (engine == "auto" and not cuda_available()):
        return use_interpreter(force=True)  # force=True also patches the autotuner when already on
    return interpreter_active()


def uses_cuda(engine: str) -> bool:
    """True when checks on ``engine`` run on CUDA here (``cuda``, or ``auto`` with a GPU visible)."""
    return engine == "cuda" or (engine == "auto" and cuda_available())


def engine_problem(engine: str) -> str | None:
    """A one-line reason why ``engine`` cannot run here, or None."""
    if engine == "cuda" and not cuda_available():
        return "engine 'cuda' needs an NVIDIA GPU and none is visible; use engine 'emulate' or 'auto'"
    return None


# -- running -------------------------------------------------------------------------------
def contract_message(exc: BaseException, target: Any = None) -> str | None:
    """A one-line message when ``exc`` says the target breaks the contract, else None.

    Covers :class:`graphsafe.TargetError` and the ``TypeError`` that the
    engines raise when ``forward()`` returns something other than tensors.
    """
    from ..checker import TargetError
    from ..contract import is_contract_error

    if isinstance(exc, TargetError):
        msg = one_line(exc)
    elif isinstance(exc, TypeError) and is_contract_error(exc):
        msg = one_line(exc)
    else:
        return None
    name = target if isinstance(target, str) else getattr(target, "__qualname__", None)
    if name and name not in msg:
        msg = f"{name}: {msg}"
    return msg


def run_check(target: Any, *, report_dir: str | os.PathLike | None = None, **kwargs: Any):
    """``graphsafe.check(target, **kwargs)``, then a report per error finding in ``report_dir``.

    Reports are written here rather than by ``check`` so that a rename race
    (two xdist workers writing the same finding) is caught and ignored.
    """
    from ..checker import check

    result = check(target, report_dir=None, **kwargs)
    if report_dir is not None:
        write_reports(result, report_dir)
    return result


def write_reports(result: Any, report_dir: str | os.PathLike) -> None:
    errors = [f for f in result.findings if f.severity == "error"]
    if not errors:
        return
    try:
        from ..reports import write_report
    except ImportError as e:
        result.notes.append(f"reports not written: graphsafe.reports.write_report is unavailable ({e})")
        return
    for f in errors:
        try:
            f.report_dir = str(write_report(f, report_dir))
        except OSError as e:
            # Two xdist workers writing the same finding: the reports package replaces a report
            # atomically, and a writer that loses the race may raise; the other's report stands.
            dest = _existing_report(f, report_dir)
            if dest is not None:
                f.report_dir = dest
            else:  # a report is not worth losing the check result over
                result.notes.append(f"report for {f.kind.value} not written: {one_line(e)}")


def _existing_report(f: Any, report_dir: str | os.PathLike) -> str | None:
    try:
        from ..reports import report_path

        dest = report_path(f, report_dir)
    except Exception:  # noqa: BLE001 - older reports package, unreadable directory
        return None
    return str(dest) if os.path.isdir(dest) else None


def failure_text(result: Any, header: str | None = None) -> str:
    """What a failing test prints: a head line, then each error finding's summary and fix."""
    lines = []
    if header:
        lines.append(header)
    kinds = ", ".join(sorted(result.kinds)) or "ok"
    lines.append(
        f"{result.target} on {result.engine}: {kinds} "
        f"({result.examples} examples, {result.steps} steps, {result.seconds:.1f}s)"
    )
    for f in result.findings:
        if f.severity != "error":
            continue
        lines.append("")
        lines.append(f.summary())
        lines.append(f"  fix: {f.fix}")
    for n in result.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


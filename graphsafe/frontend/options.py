"""Every front end's options, resolved in one place.

The command line, the pytest plugin's items, the ``graphsafe`` fixture with its marker, and
:func:`graphsafe.check` / :func:`graphsafe.audit` each collect what the user wrote as
:class:`Given` values (option name -> value, where it was written, whether it is text to parse),
and :func:`resolve` turns them into the two objects one check runs with: a
:class:`~graphsafe.CheckOptions` (what is checked) and a :class:`RunOptions` (where, how long,
which Hypothesis profile, where reports go).  What a front end decides when the user does not say
is its :data:`FRONTS` row; every other default is in :mod:`graphsafe.defaults`.

Text (``"1,2,4"``, ``"stale-pointer,lazy-init"``, ``"90"``) from a command line or an ini file is
parsed here, each bad value a one-line :class:`~graphsafe.errors.UsageError` that names the option
as the user wrote it; Python values (keywords, markers) go to the option objects as they are,
which validate them.  Nothing here imports a target; :func:`expand_targets` asks the registry only
for ``all``.

Example::

    resolved = resolve({"examples": Given("20", "--examples", text=True)}, "cli")
    resolved.check.examples, resolved.run.isolate   # 20, "target" on a GPU machine, else "none"
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import defaults
from ..capture.policies import POLICIES, resolve_capture
from ..checker import CheckOptions
from ..checker import expand as expand_group
from ..diagnosis import PROBES
from ..engines import ENGINES
from ..errors import UsageError
from .devices import uses_cuda
from .profiles import (
    PROFILES,
    default_examples,
    default_profile,
    env_is_ci,
    hypothesis_profile,
    profile_name,
    register_profiles,
)

__all__ = [
    "Given",
    "Front",
    "FRONTS",
    "Resolved",
    "RunOptions",
    "resolve",
    "keywords",
    "CHECK_KEYS",
    "RUN_KEYS",
    "pytest_given",
    "pytest_targets",
    "pytest_audit",
    "pytest_shard",
    "engine_name",
    "check_report_dir",
    "PROFILES",
    "ISOLATION",
    "parse_engine",
    "parse_int",
    "parse_sizes",
    "parse_probes",
    "parse_isolate",
    "parse_timeout",
    "parse_capture",
    "parse_shard",
    "parse_database",
    "expand_targets",
    "profile_name",
    "default_profile",
    "default_examples",
    "env_is_ci",
    "register_profiles",
    "hypothesis_profile",
    "one_line",
]

ISOLATION = defaults.ISOLATION


# -- parsing text ----------------------------------------------------------------------------
def one_line(msg: Any) -> str:
    """Collapse a (possibly multi-line) message into one line."""
    return re.sub(r"\s*\n\s*", " ", str(msg)).strip()


def parse_engine(value: Any, where: str = "engine") -> str:
    v = str(value).strip().lower()
    if v not in ENGINES:
        raise UsageError(f"{where}: unknown engine {value!r}; choose one of {', '.join(ENGINES)}")
    return v


def parse_int(value: Any, where: str, minimum: int = 1) -> int:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        raise UsageError(f"{where}: expected an integer, got {value!r}") from None
    if n < minimum:
        raise UsageError(f"{where}: must be >= {minimum}, got {n}")
    return n


def parse_isolate(value: Any, where: str = "isolate") -> str:
    v = str(value).strip().lower()
    if v not in ISOLATION:
        raise UsageError(f"{where}: unknown isolation {value!r}; choose one of {', '.join(ISOLATION)}")
    return v


def parse_timeout(value: Any, where: str = "timeout") -> float:
    """Seconds, > 0 (``"90"``, ``"2.5"``)."""
    try:
        t = float(str(value).strip())
    except (TypeError, ValueError):
        raise UsageError(f"{where}: expected a number of seconds, got {value!r}") from None
    if not t > 0 or t != t or t == float("inf"):
        raise UsageError(f"{where}: must be a number of seconds > 0, got {value!r}")
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
    parts = _split(value)
    if not parts or parts == ["all"]:
        return tuple(PROBES)
    out: list[str] = []
    for p in parts:
        if p == "all":
            out.extend(n for n in PROBES if n not in out)
            continue
        if p not in PROBES:
            raise UsageError(f"{where}: unknown probe {p!r}; known probes: {', '.join(PROBES)}")
        if p not in out:
            out.append(p)
    return tuple(out)


def parse_capture(value: Any, where: str = "capture") -> tuple[str, ...] | None:
    """Capture policy names from ``"worst,minimal"`` or a list; empty -> None (explore).  Text names
    policies only: an unknown name offers the names (a function ``size -> Batch`` is the API's alone)."""
    parts = _split(value)
    if not parts:
        return None
    known = [defaults.CAPTURE, *POLICIES]
    for p in parts:
        if p not in known:
            close = difflib.get_close_matches(p, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise UsageError(
                f"{where}: unknown capture policy {p!r}; {hint}choose {defaults.CAPTURE} or some of "
                f"{', '.join(POLICIES)}, comma-separated"
            )
    resolve_capture(parts)
    return tuple(parts)


def parse_shard(value: Any, where: str = "shard") -> tuple[int, int] | None:
    """``"2/4"`` -> ``(2, 4)``: shard K of N, 1 <= K <= N; empty -> None (every target)."""
    if value is None or not str(value).strip():
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value))
    if m is None:
        raise UsageError(f"{where}: expected K/N (run shard K of N), got {value!r}")
    k, n = int(m[1]), int(m[2])
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"{where}: no shard {k} of {n} in {value!r}; K runs from 1 to N (e.g. 1/{max(n, 2)})")
    return k, n


def parse_database(value: Any, where: str = "database") -> str | None:
    """A directory or a ``redis://`` URL, as given (checked when a check opens it); empty -> None."""
    text = str(value).strip() if value is not None else ""
    return text or None


def expand_targets(values: Iterable[str]) -> list[str]:
    """Target names in the given order, de-duplicated; ``all`` expands to every registered name (sorted),
    ``flashinfer`` and ``vllm`` to the FlashInfer and vLLM targets."""
    out: list[str] = []
    for v in _split(list(values)):
        out.extend(n for n in expand_group(v) if n not in out)
    return out


# -- how a check runs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RunOptions:
    """How one check runs, beside what it checks (:class:`~graphsafe.checker.CheckOptions`).

    * ``isolate``: ``"none"`` (this process) or ``"target"`` (a process of the target's own);
    * ``timeout``: seconds before the check is stopped (a hung target), in every mode;
    * ``report_dir``: write a report per finding there (checked before the check runs);
    * ``profile``: the Hypothesis profile to load for the check (None: the current settings).
    """

    isolate: str = "none"
    timeout: float = defaults.TIMEOUT_S
    report_dir: str | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.isolate not in ISOLATION:
            raise UsageError(f"isolate: unknown isolation {self.isolate!r}; choose one of {', '.join(ISOLATION)}")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or not self.timeout > 0:
            raise UsageError(f"timeout: must be a number of seconds > 0, got {self.timeout!r}")
        if self.report_dir is not None:
            object.__setattr__(self, "report_dir", check_report_dir(self.report_dir))


def check_report_dir(path: str | os.PathLike) -> str:
    """``path`` made absolute, after checking that reports can be written there (:class:`UsageError`)."""
    p = Path(os.path.expanduser(os.fspath(path))).resolve()
    if p.exists() and not p.is_dir():
        raise UsageError(f"report directory {os.fspath(path)!r} is a file; give a directory")
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"report directory {os.fspath(path)!r} cannot be written ({existing} is not writable)")
    return str(p)


# -- resolution -----------------------------------------------------------------------------------
#: options that go to :class:`~graphsafe.CheckOptions`, and those that go to :class:`RunOptions`
CHECK_KEYS = tuple(f.name for f in dataclasses.fields(CheckOptions))
RUN_KEYS = tuple(f.name for f in dataclasses.fields(RunOptions))


@dataclass(frozen=True)
class Given:
    """One option as the user gave it: the value, where (``"--steps"``, ``"ini graphsafe_steps"``,
    ``"steps="``) for messages, and whether it is text to parse (a command line, an ini file)."""

    value: Any
    where: str
    text: bool = False


@dataclass(frozen=True)
class Front:
    """What one front end decides when the user does not say.

    * ``isolate``: ``"none"``, ``"target"``, or ``"auto"``: ``"target"`` where checks run on CUDA (a
      device-side assert or an illegal access breaks the whole process's CUDA context, and every
      later check in it), else ``"none"``;
    * ``profile``: ``None`` keeps Hypothesis' current settings; ``"by-ci"`` loads ``ci`` when ``$CI`` is
      true, else ``fast``;
    * ``examples``: when neither a number nor a profile is given (None: :data:`graphsafe.defaults.EXAMPLES`).
    """

    isolate: str
    profile: str | None
    examples: int | None = None


FRONTS: dict[str, Front] = {
    "api": Front(isolate="none", profile=None),  # graphsafe.check(): see its docstring for why
    "audit": Front(isolate="none", profile=None, examples=defaults.AUDIT_EXAMPLES),  # graphsafe.audit()
    "cli": Front(isolate="auto", profile=None),  # graphsafe check
    "cli-audit": Front(isolate="auto", profile=None, examples=defaults.AUDIT_EXAMPLES),  # graphsafe audit
    "plugin": Front(isolate="target", profile="by-ci"),  # --graphsafe items
    "fixture": Front(isolate="none", profile="by-ci"),  # the graphsafe fixture and marker
}


@dataclass(frozen=True)
class Resolved:
    """One front end's options, resolved: ``examples_given`` says whether the count was asked for."""

    check: CheckOptions
    run: RunOptions
    examples_given: bool


def _seed(value: Any, where: str) -> int:
    return parse_int(value, where, minimum=0)


_TEXT: dict[str, Callable[[Any, str], Any]] = {
    "engine": parse_engine,
    "examples": parse_int,
    "steps": parse_int,
    "seed": _seed,
    "capture_sizes": parse_sizes,
    "capture": parse_capture,
    "probes": parse_probes,
    "isolate": parse_isolate,
    "timeout": parse_timeout,
    "database": parse_database,
}


def _unknown(name: str) -> UsageError:
    known = CHECK_KEYS + RUN_KEYS
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(known)}"
    return UsageError(f"unknown graphsafe option {name!r}{hint}")


def _value(name: str, given: Given) -> Any:
    v = given.value
    if given.text and name in _TEXT:
        return _TEXT[name](v, given.where)
    if name == "capture_sizes" and isinstance(v, Iterable) and not isinstance(v, (str, tuple)):
        return tuple(v)
    return v


def resolve(given: Mapping[str, Given], front: str) -> Resolved:
    """``given`` (option name -> :class:`Given`; a None value counts as not given) for the front end
    ``front`` (a key of :data:`FRONTS`) as the options one check runs with.  A typo, an unknown
    value or an unusable report folder is a :class:`~graphsafe.errors.UsageError`."""
    row = FRONTS[front]
    values: dict[str, Any] = {}
    for name, g in given.items():
        if name not in CHECK_KEYS + RUN_KEYS:
            raise _unknown(name)
        if g.value is not None:
            values[name] = _value(name, g)
            if values[name] is None:  # empty text: not given
                del values[name]
    profile = None
    if "profile" in values or row.profile == "by-ci":
        try:
            profile = profile_name(values.get("profile"))
        except UsageError as e:
            where = given["profile"].where.rstrip("=") if "profile" in given else "profile"
            raise UsageError(f"{where}: {str(e).removeprefix('profile: ')}") from None
    examples_given = "examples" in values
    if not examples_given:
        values["examples"] = default_examples(profile) if profile else (row.examples or defaults.EXAMPLES)
    check = CheckOptions.build(**{k: values.get(k) for k in CHECK_KEYS})
    isolate = values.get("isolate", row.isolate)
    if isolate == "auto":
        isolate = "target" if isinstance(check.engine, str) and uses_cuda(check.engine) else "none"
    run = RunOptions(
        isolate=isolate,
        timeout=values.get("timeout", defaults.TIMEOUT_S),
        report_dir=values.get("report_dir"),
        profile=profile,
    )
    return Resolved(check, run, examples_given)


def keywords(params: Mapping[str, Any], where: str = "{}=") -> dict[str, Given]:
    """Python keyword values (``graphsafe.check(...)``, a marker) as :class:`Given` values."""
    return {k: Given(v, where.format(k)) for k, v in params.items()}


def pytest_given(config: Any, early: bool = False) -> dict[str, Given]:
    """The ``--graphsafe-*`` options and ``graphsafe_*`` ini keys of a pytest run (the command line wins).

    ``early``: from ``config.known_args_namespace`` (in ``pytest_load_initial_conftests``, before
    ``config.option`` is filled in).  A relative ini report folder is relative to the ini file.
    """
    ns = config.known_args_namespace if early else config.option
    out: dict[str, Given] = {}
    for name in CHECK_KEYS + RUN_KEYS:
        flag = "--graphsafe-" + name.replace("_", "-")
        value = getattr(ns, f"graphsafe_{name}", None)
        if value is not None:
            out[name] = Given(value, flag, text=True)
            continue
        try:
            ini = config.getini(f"graphsafe_{name}")
        except (ValueError, KeyError):  # not an ini key of the plugin (or registered after the ini was read)
            continue
        if ini not in (None, "", []):
            out[name] = Given(ini, f"ini graphsafe_{name}", text=True)
    if "report_dir" in out:  # absolute, so that every xdist worker writes to the same folder
        given = out["report_dir"]
        base = config.invocation_params.dir
        if given.where.startswith("ini") and config.inipath is not None:
            base = config.inipath.parent
        path = (Path(base) / os.path.expanduser(str(given.value))).resolve()
        out["report_dir"] = Given(str(path), given.where)
    return out


def pytest_targets(config: Any) -> list[str]:
    """The ``--graphsafe`` targets of a pytest run (else the ini's ``graphsafe_targets``), expanded."""
    targets = config.option.graphsafe_targets
    return expand_targets(targets if targets is not None else config.getini("graphsafe_targets") or [])


def pytest_shard(config: Any) -> tuple[int, int] | None:
    """``--graphsafe-shard K/N``, else the ini's ``graphsafe_shard``: None for every target."""
    flag = getattr(config.option, "graphsafe_shard", None)
    if flag is not None:
        return parse_shard(flag, "--graphsafe-shard")
    try:
        return parse_shard(config.getini("graphsafe_shard"), "ini graphsafe_shard")
    except (ValueError, KeyError):  # not an ini key of the plugin
        return None


def pytest_audit(config: Any) -> bool:
    """``--graphsafe-audit``, else the ini's ``graphsafe_audit``."""
    flag = config.option.graphsafe_audit
    return bool(flag if flag is not None else config.getini("graphsafe_audit"))


def engine_name(check: CheckOptions) -> str:
    """The engine's name for device questions: ``auto`` for an engine object (it decides itself)."""
    return check.engine if isinstance(check.engine, str) else "auto"

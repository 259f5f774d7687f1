"""Every front end's options are resolved by graphsafe.frontend.options.resolve, each default in one place."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from graphsafe import CheckOptions, UsageError, defaults
from graphsafe.frontend import options as o
from graphsafe.frontend import runner
from graphsafe.frontend.options import Given, keywords, resolve


def text(**values: str) -> dict[str, Given]:
    return {k: Given(v, "--" + k.replace("_", "-"), text=True) for k, v in values.items()}


@pytest.fixture(autouse=True)
def no_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)


def test_check_options_take_their_defaults_from_the_defaults_module():
    opts = CheckOptions()
    assert (opts.engine, opts.examples, opts.steps) == (defaults.ENGINE, defaults.EXAMPLES, defaults.STEPS)
    # (no capture named: a target's engine's policy where it has one, else the defaults module's)
    assert opts.capture is None and opts.policies == CheckOptions(capture=defaults.CAPTURE).policies
    assert o.RunOptions().timeout == defaults.TIMEOUT_S


def test_the_api_signature_leaves_every_default_to_the_resolver():
    params = inspect.signature(runner.check).parameters
    assert all(p.default is None for name, p in params.items() if name != "target")


@pytest.mark.parametrize(
    "front, isolate, profile, examples",
    [
        ("api", "none", None, defaults.EXAMPLES),
        ("audit", "none", None, defaults.AUDIT_EXAMPLES),
        ("plugin", "target", "graphsafe-fast", defaults.PROFILES["fast"][1]),
        ("fixture", "none", "graphsafe-fast", defaults.PROFILES["fast"][1]),
    ],
)
def test_each_front_end_fills_in_what_the_user_did_not_say(front, isolate, profile, examples):
    r = resolve({}, front)
    assert (r.run.isolate, r.run.profile, r.check.examples, r.examples_given) == (isolate, profile, examples, False)
    assert r.check.steps == defaults.STEPS and r.run.timeout == defaults.TIMEOUT_S


def test_the_profile_decides_the_examples_unless_they_are_given(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert resolve({}, "plugin").check.examples == defaults.PROFILES["ci"][1]
    assert resolve(text(profile="thorough"), "cli").check.examples == defaults.PROFILES["thorough"][1]
    r = resolve(text(profile="thorough", examples="7"), "cli")
    assert (r.check.examples, r.examples_given, r.run.profile) == (7, True, "graphsafe-thorough")


@pytest.mark.parametrize("front", ["cli", "cli-audit"])
def test_the_command_line_isolates_where_checks_run_on_cuda(front, monkeypatch):
    monkeypatch.setattr(o, "uses_cuda", lambda engine: engine in ("cuda", "auto"))  # as on a GPU machine
    assert resolve({}, front).run.isolate == "target"  # auto resolves to cuda
    assert resolve(text(engine="cuda"), front).run.isolate == "target"
    assert resolve(text(engine="emulate"), front).run.isolate == "none"
    assert resolve({**text(engine="cuda"), "isolate": Given("none", "--no-isolate")}, front).run.isolate == "none"


def test_text_is_parsed_and_named_as_the_user_wrote_it():
    r = resolve(text(steps="3", capture_sizes="4,1,1", probes="lazy-init", timeout="9.5", seed="0"), "cli")
    assert (r.check.steps, r.check.capture_sizes, r.check.probes, r.run.timeout, r.check.seed) == (
        3,
        (1, 4),
        ("lazy-init",),
        9.5,
        0,
    )
    with pytest.raises(UsageError, match="^--steps: expected an integer, got 'x'$"):
        resolve(text(steps="x"), "cli")
    with pytest.raises(UsageError, match="^ini graphsafe_profile: unknown profile 'slow'"):
        resolve({"profile": Given("slow", "ini graphsafe_profile", text=True)}, "plugin")


def test_python_values_go_to_the_option_objects_as_they_are():
    r = resolve(keywords({"capture_sizes": [2, 1], "examples": 3, "database": False}), "api")
    assert (r.check.capture_sizes, r.check.examples, r.check.database) == ((1, 2), 3, False)
    with pytest.raises(UsageError, match="examples must be >= 1, got 0"):
        resolve(keywords({"examples": 0}), "api")


def test_later_layers_win_and_a_typo_gets_a_suggestion():
    run_given = text(examples="5", steps="2")
    marker = keywords({"examples": 9}, "@pytest.mark.graphsafe({}=...)")
    r = resolve({**run_given, **marker, **keywords({"steps": 1})}, "fixture")
    assert (r.check.examples, r.check.steps) == (9, 1)
    with pytest.raises(UsageError, match="unknown graphsafe option 'exampels'; did you mean examples?"):
        resolve(keywords({"exampels": 20}), "fixture")


def test_every_option_belongs_to_one_of_the_two_option_objects():
    assert set(o.CHECK_KEYS) == {f.name for f in dataclasses.fields(CheckOptions)}
    assert set(o.RUN_KEYS) == {"isolate", "timeout", "report_dir", "profile"}
    assert not set(o.CHECK_KEYS) & set(o.RUN_KEYS)

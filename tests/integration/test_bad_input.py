"""Bad input to the public API gets one short line naming the field or method and the fix.

One case per bad input: a ``CaptureSpec`` field, a ``Batch`` rule, a broken
Target (``tests/targets/broken.py``), a bad argument to ``graphsafe.check``.  Each is
checked through the Python API (the exception's message) and, where the
command line can express it, through ``graphsafe check`` (one ``graphsafe:
error:`` line on stderr, exit status 2, no traceback).

``python -m tests.integration.test_bad_input`` prints the cases as a markdown table
("bad input | message") from the messages graphsafe gives today.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from graphsafe import Batch, CaptureSpec, ContractError, UsageError, check
from graphsafe.frontend import options as frontend
from graphsafe.frontend.cli import main
from tests.subprocesses import REPO, env_with_repo, plugin_args, with_path

SPEC = CaptureSpec(max_reqs=4, max_query_len=2, max_seq_len=16, block_size=4)
# a check that reaches the target's forward() and live(): one capture size, a couple of examples
RUN = dict(engine="auto", examples=2, steps=2, probes=["stale-pointer"], capture_sizes=[2])
CLI_RUN = ["--engine", "auto", "--examples", "2", "--steps", "2", "--probes", "stale-pointer", "--capture-sizes", "2"]
MAX_LEN = 300  # "short": a line a terminal shows whole, give or take


@dataclass(frozen=True)
class Case:
    label: str  # what was wrong (the first column of the documentation's bad-input table)
    call: Callable[[], Any]
    exc: type
    needles: tuple[str, ...]  # the field or method named, and the fix
    cli: tuple[str, ...] | None = None  # `graphsafe check` arguments that give the same error
    cli_needles: tuple[str, ...] | None = None  # when the command line words it differently
    long_ok: bool = False  # the message lists every registered target

    def __str__(self) -> str:
        return self.label


def _check(target: str, **kw: Any) -> Callable[[], Any]:
    return lambda: check(target, **{**RUN, **kw})


def _batch(**kw: Any) -> Callable[[], Any]:
    base = dict(query_lens=(1,), seq_lens=(1,), block_table=((1,),))
    return lambda: Batch(**{**base, **kw})


def _fits(batch_kw: dict) -> Callable[[], Any]:
    return lambda: SPEC.validate_batch(Batch(**batch_kw))


def _broken(name: str) -> tuple[str, ...]:
    return ("check", f"tests.targets.broken:{name}", *CLI_RUN)


CASES = [
    # -- CaptureSpec fields --------------------------------------------------------------------------
    Case(
        "`CaptureSpec(max_reqs=0)`",
        lambda: CaptureSpec(max_reqs=0),
        ValueError,
        ("CaptureSpec.max_reqs", "must be >= 1", "got 0"),
    ),
    Case(
        "`CaptureSpec(max_query_len=0)`",
        lambda: CaptureSpec(max_query_len=0),
        ValueError,
        ("CaptureSpec.max_query_len", "must be >= 1"),
    ),
    Case(
        "`CaptureSpec(max_seq_len=0)`",
        lambda: CaptureSpec(max_seq_len=0),
        ValueError,
        ("CaptureSpec.max_seq_len", "must be >= 1"),
    ),
    Case(
        "`CaptureSpec(block_size=0)`",
        lambda: CaptureSpec(block_size=0),
        ValueError,
        ("CaptureSpec.block_size", "must be >= 1"),
    ),
    Case(
        "`CaptureSpec(max_reqs=2.0)` (not an int)",
        lambda: CaptureSpec(max_reqs=2.0),
        ValueError,
        ("CaptureSpec.max_reqs", "must be an int", "float"),
    ),
    Case(
        "`CaptureSpec(max_reqs=True)` (a bool)",
        lambda: CaptureSpec(max_reqs=True),
        ValueError,
        ("CaptureSpec.max_reqs", "must be an int", "bool"),
    ),
    Case(
        "`CaptureSpec(max_query_len=9, max_seq_len=8)`",
        lambda: CaptureSpec(max_query_len=9, max_seq_len=8),
        ValueError,
        ("CaptureSpec.max_query_len", "must be <= max_seq_len"),
    ),
    Case(
        "`CaptureSpec(num_blocks=3)` (too few for a full batch)",
        lambda: CaptureSpec(max_reqs=2, max_seq_len=8, block_size=4, num_blocks=3),
        ValueError,
        ("CaptureSpec.num_blocks", "must be >=", "raise num_blocks or leave it 0"),
    ),
    Case(
        "`CaptureSpec(capture_sizes=(0,))`",
        lambda: CaptureSpec(capture_sizes=(0,)),
        ValueError,
        ("CaptureSpec.capture_sizes", "must be >= 1"),
    ),
    Case(
        "`CaptureSpec(max_reqs=2, capture_sizes=(4,))`",
        lambda: CaptureSpec(max_reqs=2, capture_sizes=(4,)),
        ValueError,
        ("CaptureSpec.capture_sizes", "> max_reqs"),
    ),
    # -- Batch rules ----------------------------------------------------------------------------------
    Case(
        "`Batch(query_lens=3, ...)` (not a tuple)",
        _batch(query_lens=3),
        ValueError,
        ("Batch.query_lens", "must be a tuple of ints"),
    ),
    Case(
        "`Batch(block_table=5, ...)` (not a tuple of rows)",
        _batch(block_table=5),
        ValueError,
        ("Batch.block_table", "must be a tuple of per-request block-id tuples"),
    ),
    Case(
        "`Batch((), (), ())` (no request)",
        _batch(query_lens=(), seq_lens=(), block_table=()),
        ValueError,
        ("Batch.query_lens", "must hold at least one request"),
    ),
    Case(
        "`Batch` with fewer `seq_lens` than `query_lens`",
        _batch(query_lens=(1, 1), block_table=((1,), (2,))),
        ValueError,
        ("Batch.seq_lens", "give one per request"),
    ),
    Case(
        "`Batch` with more `block_table` rows than requests",
        _batch(block_table=((1,), (2,))),
        ValueError,
        ("Batch.block_table", "give one row per request"),
    ),
    Case("`Batch(query_lens=(0,), ...)`", _batch(query_lens=(0,)), ValueError, ("Batch.query_lens[0]", "must be >= 1")),
    Case(
        "`Batch` with `seq_lens[i] < query_lens[i]`",
        _batch(query_lens=(2,)),
        ValueError,
        ("Batch.seq_lens[0]", "must be >= query_lens[0]"),
    ),
    Case(
        "`Batch` with a block shared by two requests",
        _batch(query_lens=(1, 1), seq_lens=(1, 1), block_table=((1,), (1,))),
        ValueError,
        ("Batch.block_table", "must be distinct across requests"),
    ),
    Case(
        "`Batch` with a negative block id",
        _batch(block_table=((-1,),)),
        ValueError,
        ("Batch.block_table[0]", "must be >= 0"),
    ),
    Case("`Batch(seed=-1, ...)`", _batch(seed=-1), ValueError, ("Batch.seed", "must be >= 0")),
    Case(
        "`Batch(num_slots=1)` with 2 requests",
        _batch(query_lens=(1, 1), seq_lens=(1, 1), block_table=((1,), (2,)), num_slots=1),
        ValueError,
        ("Batch.num_slots", "must be >= num_reqs"),
    ),
    Case(
        "`spec.validate_batch`: more slots than `max_reqs`",
        _fits(dict(query_lens=(1,) * 5, seq_lens=(1,) * 5, block_table=tuple((i + 1,) for i in range(5)))),
        ValueError,
        ("Batch.num_slots", "must be <= CaptureSpec.max_reqs"),
    ),
    Case(
        "`spec.validate_batch`: query longer than `max_query_len`",
        _fits(dict(query_lens=(3,), seq_lens=(3,), block_table=((1,),))),
        ValueError,
        ("Batch.query_lens[0]", "exceeds CaptureSpec.max_query_len"),
    ),
    Case(
        "`spec.validate_batch`: sequence longer than `max_seq_len`",
        _fits(dict(query_lens=(1,), seq_lens=(17,), block_table=((1, 2, 3, 4, 5),))),
        ValueError,
        ("Batch.seq_lens[0]", "exceeds CaptureSpec.max_seq_len"),
    ),
    Case(
        "`spec.validate_batch`: too few blocks for `seq_lens`",
        _fits(dict(query_lens=(1,), seq_lens=(9,), block_table=((1,),))),
        ValueError,
        ("Batch.block_table[0]", "needs ceil(9 / block_size 4) = 3"),
    ),
    Case(
        "`spec.validate_batch`: more blocks than `max_seq_len` needs",
        _fits(dict(query_lens=(1,), seq_lens=(1,), block_table=((1, 2, 3, 4, 5),))),
        ValueError,
        ("Batch.block_table[0]", "more than ceil(max_seq_len / block_size)"),
    ),
    Case(
        "`spec.validate_batch`: block id past `num_blocks`",
        _fits(dict(query_lens=(1,), seq_lens=(1,), block_table=((999,),))),
        ValueError,
        ("Batch.block_table[0]", "outside [0, num_blocks=17)"),
    ),
    # -- targets that break the contract --------------------------------------------------------------
    Case(
        "a target without `forward()`",
        _check("tests.targets.broken:NoForward"),
        ContractError,
        ("NoForward has no forward() method", "a Target needs setup(spec, device), prepare(batch) and forward()"),
        cli=_broken("NoForward"),
    ),
    Case(
        "a `Target` subclass that does not override `forward()`",
        _check("tests.targets.broken:ForwardNotImplemented"),
        ContractError,
        ("ForwardNotImplemented.forward() is not implemented", "override it"),
        cli=_broken("ForwardNotImplemented"),
    ),
    Case(
        "`support = Support.NEVER`",
        _check("tests.targets.broken:SupportNever"),
        ContractError,
        ("SupportNever.support is Support.NEVER", "must not be captured"),
        cli=_broken("SupportNever"),
    ),
    Case(
        '`support = "always"` (not a Support)',
        _check("tests.targets.broken:SupportBogus"),
        ContractError,
        ("SupportBogus.support", "must be a graphsafe.Support"),
        cli=_broken("SupportBogus"),
    ),
    Case(
        "`default_spec` is a dict",
        _check("tests.targets.broken:DefaultSpecDict"),
        ContractError,
        ("DefaultSpecDict.default_spec", "must be a graphsafe.CaptureSpec or None"),
        cli=_broken("DefaultSpecDict"),
    ),
    Case(
        "`forward()` returns an int",
        _check("tests.targets.broken:ForwardReturnsInt"),
        ContractError,
        ("forward()", "must return a tensor or a non-empty tuple of tensors", "got int"),
        cli=_broken("ForwardReturnsInt"),
    ),
    Case(
        "`forward()` returns None",
        _check("tests.targets.broken:ForwardReturnsNothing"),
        ContractError,
        ("forward()", "must return a tensor or a non-empty tuple of tensors", "got NoneType"),
        cli=_broken("ForwardReturnsNothing"),
    ),
    Case(
        "`static()` returns a tensor the target does not hold",
        _check("tests.targets.broken:StaticNotHeld"),
        ContractError,
        ("StaticNotHeld.static()['scale'] is not held by the target", "return tensors stored on the target"),
        cli=_broken("StaticNotHeld"),
    ),
    Case(
        "`static()` holds a float",
        _check("tests.targets.broken:StaticNotTensor"),
        ContractError,
        ("StaticNotTensor.static()['scale'] is a float, not a tensor", "return only tensors"),
        cli=_broken("StaticNotTensor"),
    ),
    Case(
        "`static()` returns a bare tensor",
        _check("tests.targets.broken:StaticNotDict"),
        ContractError,
        ("StaticNotDict.static() must return a dict of name -> tensor or a list of tensors",),
        cli=_broken("StaticNotDict"),
    ),
    Case(
        "`live()` (the default) gets fewer rows than live tokens",
        _check("tests.targets.broken:ShortOutput"),
        ContractError,
        (
            "ShortOutput.live() returned a tensor of shape (0, 4)",
            "rows must be the batch's",
            "override live() if your outputs are laid out differently",
        ),
        cli=_broken("ShortOutput"),
    ),
    Case(
        "`live()` returns an int",
        _check("tests.targets.broken:LiveReturnsInt"),
        ContractError,
        ("LiveReturnsInt.live() must return a tensor or a tuple of tensors", "got int"),
        cli=_broken("LiveReturnsInt"),
    ),
    # -- arguments to check() / graphsafe check -------------------------------------------------------
    Case(
        "an unknown target name",
        _check("nosuch"),
        UsageError,
        ("unknown target 'nosuch'", "give 'module:Class' or one of:"),
        cli=("check", "nosuch"),
        long_ok=True,
    ),
    Case(
        "a module that does not import",
        _check("nosuch_module_xyz:Cls"),
        UsageError,
        ("module 'nosuch_module_xyz' does not import", "ModuleNotFoundError"),
        cli=("check", "nosuch_module_xyz:Cls"),
    ),
    Case(
        "a class the module does not have",
        _check("tests.targets.synthetic:Nope"),
        UsageError,
        ("module 'tests.targets.synthetic' has no attribute 'Nope'",),
        cli=("check", "tests.targets.synthetic:Nope"),
    ),
    Case(
        "a name that is not a class",
        _check("tests.targets.synthetic:token_lens"),
        UsageError,
        ("'tests.targets.synthetic:token_lens' is a function, not a Target class",),
        cli=("check", "tests.targets.synthetic:token_lens"),
    ),
    Case(
        "a target that is neither a class nor a name",
        lambda: check(42, **RUN),
        UsageError,
        ("target must be a Target class, 'module:Class' or a registered name", "got int"),
    ),
    Case(
        "an unknown engine name",
        _check("tests.targets.synthetic:Safe", engine="bogus"),
        ValueError,
        ("unknown engine 'bogus'", "choose one of auto, cuda, emulate"),
        cli=("check", "tests.targets.synthetic:Safe", "--engine", "bogus"),
    ),
    Case(
        "a capture size above `max_reqs`",
        _check("tests.targets.synthetic:Safe", capture_sizes=[9]),
        ValueError,
        ("capture size 9", "must be an int in [1, spec.max_reqs=4]"),
        cli=("check", "tests.targets.synthetic:Safe", "--engine", "auto", "--examples", "1", "--capture-sizes", "9"),
    ),
    Case(
        "a capture size of 0",
        _check("tests.targets.synthetic:Safe", capture_sizes=[0]),
        ValueError,
        ("capture size 0", "must be an int in [1, spec.max_reqs=4]"),
        cli=("check", "tests.targets.synthetic:Safe", "--capture-sizes", "0"),
        cli_needles=("--capture-sizes", "must be >= 1, got 0"),
    ),
    Case(
        "`examples=0`",
        _check("tests.targets.synthetic:Safe", examples=0),
        ValueError,
        ("examples", "must be >= 1"),
        cli=("check", "tests.targets.synthetic:Safe", "--examples", "0"),
    ),
    Case(
        "`steps=0`",
        _check("tests.targets.synthetic:Safe", steps=0),
        ValueError,
        ("steps", "must be >= 1"),
        cli=("check", "tests.targets.synthetic:Safe", "--steps", "0"),
    ),
    Case(
        "`spec=` something other than a CaptureSpec",
        _check("tests.targets.synthetic:Safe", spec={"max_reqs": 2}),
        ContractError,
        ("spec must be a graphsafe.CaptureSpec", "got dict"),
    ),
    Case(
        "an unknown probe",
        _check("tests.targets.synthetic:Safe", probes=["stale-pointr"]),
        ValueError,
        ("unknown probe 'stale-pointr'", "known probes:"),
        cli=("check", "tests.targets.synthetic:Safe", "--probes", "stale-pointr"),
    ),
    Case(
        "`--timeout 0` (command line; `--graphsafe-timeout` alike)",
        lambda: frontend.parse_timeout(0, "--timeout"),
        ValueError,
        ("--timeout", "must be a number of seconds > 0"),
        cli=("check", "tests.targets.synthetic:Safe", "--timeout", "0"),
    ),
    Case(
        "`--graphsafe-isolate process`",
        lambda: frontend.parse_isolate("process", "--graphsafe-isolate"),
        ValueError,
        ("--graphsafe-isolate", "unknown isolation 'process'", "choose one of none, target"),
    ),
]
API_CASES = CASES
CLI_CASES = [c for c in CASES if c.cli is not None]


def _short(msg: str, case: Case) -> None:
    assert "\n" not in msg and "Traceback" not in msg, msg
    if not case.long_ok:
        assert len(msg) <= MAX_LEN, (len(msg), msg)


def api_message(case: Case) -> str:
    with pytest.raises(case.exc) as info:
        case.call()
    return str(info.value)


@pytest.fixture
def interpreter_restored(monkeypatch):
    # graphsafe's command line switches Triton to its interpreter for engine emulate (auto on a CPU
    # machine): put TRITON_INTERPRET back afterwards, as tests/test_cli.py does
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    monkeypatch.delenv("CI", raising=False)


@pytest.mark.parametrize("case", API_CASES, ids=str)
def test_api_message_names_the_field_and_the_fix(case: Case, interpreter_restored):
    msg = api_message(case)
    for needle in case.needles:
        assert needle in msg, (needle, msg)
    _short(msg, case)


@pytest.mark.parametrize("case", CLI_CASES, ids=str)
def test_cli_gives_one_line_and_exit_2(case: Case, capsys, interpreter_restored):
    assert main(list(case.cli)) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    errors = [line for line in lines if line.startswith("graphsafe: error: ")]
    assert len(errors) == 1, err
    assert "Traceback" not in err + out
    msg = errors[0]
    for needle in case.cli_needles or case.needles:
        assert needle in msg, (needle, msg)
    _short(msg.removeprefix("graphsafe: error: "), case)


def test_plugin_rejects_bad_isolation_options(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", with_path(REPO))
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    plugin = plugin_args()
    result = pytester.runpytest_inprocess(
        *plugin, "-p", "no:cacheprovider", "--graphsafe-isolate", "process", "--collect-only"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "graphsafe: --graphsafe-isolate: unknown isolation 'process'; choose one of none, target" in result.stderr.str()
    )
    result = pytester.runpytest_inprocess(*plugin, "-p", "no:cacheprovider", "--graphsafe-timeout=-1", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "graphsafe: --graphsafe-timeout: must be a number of seconds > 0, got '-1'" in result.stderr.str()


def test_a_real_process_prints_one_line_and_no_traceback(tmp_path):
    """What a user sees: the installed command's stderr, in a fresh process."""
    env = env_with_repo()
    for target in ("tests.targets.broken:StaticNotHeld", "nosuch"):
        proc = subprocess.run(
            [sys.executable, "-m", "graphsafe", "check", target, *CLI_RUN],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 2, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("graphsafe: error: ")]
        assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr


def markdown_table() -> str:
    """The cases as a Markdown table: what was wrong, and the message graphsafe gives (API wording)."""
    rows = ["| bad input | message |", "| --- | --- |"]
    for case in API_CASES:
        try:
            case.call()
            msg = "(no error!)"
        except Exception as e:  # noqa: BLE001
            msg = f"`{type(e).__name__}: {e}`"
        rows.append(f"| {case.label} | {msg.replace('|', '&#124;')} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    from graphsafe.engines.triton_env import use_interpreter

    use_interpreter()
    print(markdown_table())

"""Specifications for reports that stay true (``graphsafe.reports.lifecycle``).

* after a fix: a check with a report dir replays the target's old reports of its engine and of the
  kinds it looked for that it did not find again; those whose recorded steps now pass are removed,
  atomically, with a note naming each; those whose steps still fail (a search can miss a bug that is
  still there) or cannot be replayed stay, with a note; other engines, other kinds, other targets,
  unreadable directories and checks that never searched leave reports alone;
* one cause, one report: an old report of the kind and cause of a report this run wrote goes, replaced
  by it, without a replay; so does one whose replay gives only that kind and cause;
* re-running: a report that says the same once timings, addresses, the environment and absolute
  paths are ignored is left untouched (bytes and mtimes); a real change rewrites it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import graphsafe
from graphsafe import CheckResult, Finding, FindingKind
from graphsafe.diagnosis import PROBES
from graphsafe.frontend.inprocess import write_reports
from graphsafe.reports import atomic, environment, lifecycle
from graphsafe.reports.paths import display_path
from tests.targets import plain_torch
from tests.unit.reports.test_reports import SPEC, leftovers, make_finding, write

TARGET = "backend.attn:FlashBackend"  # make_finding's target


def _result(*findings, probes=tuple(PROBES), calls=5, target=TARGET) -> CheckResult:
    return CheckResult(
        target=target, engine="emulate", spec=SPEC, probes=tuple(probes), findings=list(findings), calls=calls
    )


def _snapshot(path: Path) -> dict[str, tuple[bytes, int, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in sorted(path.iterdir())}


@pytest.fixture
def replays(monkeypatch):
    """The made-up target cannot run: each replay gives what ``replays.outcome`` says (the findings it
    makes, or an exception to raise), and ``replays.calls`` records which reports were replayed."""

    class Replays:
        outcome: list[Finding] | Exception = []
        calls: list[tuple[str, str, str]] = []

    def replay(data, target, engine):
        Replays.calls.append((data["kind"], target, engine))
        if isinstance(Replays.outcome, Exception):
            raise Replays.outcome
        return list(Replays.outcome)

    Replays.calls = []
    monkeypatch.setattr(lifecycle, "replay_errors", replay)
    return Replays


FIXED = ": not found by this run, and its recorded steps now pass"


# == after a fix ===============================================================================
def test_a_clean_rerun_removes_the_old_report_whose_steps_now_pass_with_a_note(tmp_path, monkeypatch, replays):
    monkeypatch.chdir(tmp_path)
    old = write(FindingKind.STALE_PADDING, tmp_path / "reports")
    result = _result()
    removed = lifecycle.prune_stale(result, tmp_path / "reports")
    assert removed == [old] and not old.exists()
    assert replays.calls == [("stale-padding", TARGET, "emulate")]
    rel = os.path.relpath(old)
    assert rel.startswith("reports/backend.attn_FlashBackend/stale-padding-")
    assert result.notes == [f"removed stale report {rel}{FIXED}"]
    assert not old.parent.exists()  # the target's folder went with its last report
    assert leftovers(tmp_path / "reports") == []


def test_a_report_whose_steps_still_fail_is_kept_with_a_note(tmp_path, monkeypatch, replays):
    monkeypatch.chdir(tmp_path)
    old = write(FindingKind.STALE_PADDING, tmp_path / "reports")
    before = _snapshot(old)
    replays.outcome = [make_finding(FindingKind.STALE_PADDING, where="self.elsewhere")]  # another place
    result = _result()
    assert lifecycle.prune_stale(result, tmp_path / "reports") == []
    assert _snapshot(old) == before
    assert result.notes == [
        f"kept report {os.path.relpath(old)}: not found by this run, but its recorded steps still fail (stale-padding)"
    ]


HOST = "host:backend/attn.py in forward"  # one host decision that froze two kernel arguments


def test_an_old_report_of_the_cause_of_a_report_this_run_wrote_is_replaced_by_it(tmp_path, monkeypatch, replays):
    monkeypatch.chdir(tmp_path)
    root = Path("reports")
    old = write(FindingKind.FROZEN_HOST_VALUE, root, where="_attn_kernel.MAX_SEQ", cause=HOST)
    replays.outcome = [make_finding(FindingKind.FROZEN_HOST_VALUE, where="_attn_kernel.MAX_SEQ", cause=HOST)]
    new = make_finding(FindingKind.FROZEN_HOST_VALUE, where="_attn_kernel.UNIFORM", cause=HOST)  # met first now
    result = _result(new)
    write_reports(result, root)
    assert not old.exists() and Path(new.report_dir).is_dir()
    assert [p.name for p in (root / "backend.attn_FlashBackend").iterdir()] == [Path(new.report_dir).name]
    assert replays.calls == []  # the new report speaks for the cause: no replay needed
    assert result.notes == [
        f"replaced report {os.path.relpath(old)} by {new.report_dir}: the same cause (frozen-host-value at {HOST})"
    ]


def test_an_old_report_whose_replay_gives_the_cause_of_a_report_this_run_wrote_is_replaced(tmp_path, replays):
    old = write(FindingKind.FROZEN_HOST_VALUE, tmp_path, cause="host:backend/attn.py:40")  # as named before
    replays.outcome = [make_finding(FindingKind.FROZEN_HOST_VALUE, where="_attn_kernel.MAX_SEQ", cause=HOST)]
    new = make_finding(FindingKind.FROZEN_HOST_VALUE, where="_attn_kernel.UNIFORM", cause=HOST)
    result = _result(new)
    write_reports(result, tmp_path)
    assert not old.exists() and Path(new.report_dir).is_dir()
    assert result.notes == [
        f"replaced report {display_path(old)} by {display_path(Path(new.report_dir))}: its recorded steps still "
        "fail, with the same cause"
    ]


def test_an_old_report_of_the_same_cause_but_another_kind_is_judged_by_its_replay(tmp_path, replays):
    old = write(FindingKind.STALE_PADDING, tmp_path, cause=HOST)
    replays.outcome = [make_finding(FindingKind.STALE_PADDING)]
    result = _result(make_finding(FindingKind.FROZEN_HOST_VALUE, cause=HOST))
    write_reports(result, tmp_path)
    assert old.is_dir() and replays.calls == [("stale-padding", TARGET, "emulate")]


def test_an_old_report_of_another_cause_whose_steps_still_fail_is_kept_beside_this_runs(tmp_path, replays):
    old = write(FindingKind.FROZEN_HOST_VALUE, tmp_path, cause="host:backend/attn.py in plan")
    replays.outcome = [make_finding(FindingKind.FROZEN_HOST_VALUE, where="self.elsewhere")]
    new = make_finding(FindingKind.FROZEN_HOST_VALUE, where="_attn_kernel.UNIFORM", cause=HOST)
    write_reports(_result(new), tmp_path)
    assert old.is_dir() and Path(new.report_dir).is_dir()


def test_a_kept_report_is_brought_up_to_date_from_its_replay_keeping_its_search_effort(tmp_path, replays):
    old = write(FindingKind.STALE_PADDING, tmp_path, message="padded slots keep stale values (at attn.py:10)")
    replays.outcome = [make_finding(FindingKind.STALE_PADDING, examples_to_find=0, seconds_to_find=0.0)]
    assert lifecycle.prune_stale(_result(), tmp_path) == []
    data = json.loads((old / "finding.json").read_text())
    assert data["message"] == replays.outcome[0].message  # what the code says now
    assert (data["examples_to_find"], data["seconds_to_find"]) == (7, 1.25)  # what the search took then
    assert leftovers(old.parent) == []


def test_a_report_that_cannot_be_replayed_is_kept_with_a_note(tmp_path, replays):
    old = write(FindingKind.LAZY_INIT, tmp_path)
    replays.outcome = ModuleNotFoundError("No module named 'backend'")
    result = _result()
    assert lifecycle.prune_stale(result, tmp_path) == []
    assert old.is_dir()
    assert len(result.notes) == 1 and result.notes[0].endswith(
        "could not be replayed (ModuleNotFoundError: No module named 'backend')"
    )


def test_another_engines_reports_are_kept_without_a_replay(tmp_path, replays):
    gpu = write(FindingKind.STALE_PADDING, tmp_path, engine="cuda")
    result = _result()  # a check on the emulator
    assert lifecycle.prune_stale(result, tmp_path) == []
    assert gpu.is_dir() and replays.calls == [] and result.notes == []


def test_the_replay_uses_the_checked_class_when_given(tmp_path, replays):
    write(FindingKind.LAZY_INIT, tmp_path)
    lifecycle.prune_stale(_result(), tmp_path, target=Toggle)
    assert replays.calls == [("lazy-init", Toggle, "emulate")]


def test_write_reports_keeps_what_this_run_wrote_and_removes_the_rest(tmp_path, replays):
    root = tmp_path / "reports"
    gone = write(FindingKind.LAZY_INIT, root)
    again = make_finding(FindingKind.STALE_PADDING)
    write_reports(_result(again), root)
    assert Path(again.report_dir).is_dir()
    assert not gone.exists()
    assert sorted(p.name for p in (root / "backend.attn_FlashBackend").iterdir()) == [Path(again.report_dir).name]


def test_write_reports_notes_each_removed_report(tmp_path, replays):
    root = tmp_path / "reports"
    a = write(FindingKind.LAZY_INIT, root)
    b = write(FindingKind.STALE_PADDING, root)
    result = _result()
    write_reports(result, root)
    assert len(result.notes) == 2
    for path, note in zip(sorted([a, b]), result.notes):
        assert note.startswith("removed stale report ") and note.endswith(f"{path.name}{FIXED}")


def test_kinds_the_check_did_not_look_for_are_kept(tmp_path, replays):
    kept = write(FindingKind.STALE_PADDING, tmp_path)
    gone = write(FindingKind.LAZY_INIT, tmp_path)
    result = _result(probes=["lazy-init"])
    assert lifecycle.prune_stale(result, tmp_path) == [gone]
    assert kept.is_dir()


def test_replay_mismatch_and_target_error_go_only_after_a_check_of_every_probe(tmp_path, replays):
    rm = write(FindingKind.REPLAY_MISMATCH, tmp_path)
    te = write(FindingKind.TARGET_ERROR, tmp_path)
    assert lifecycle.prune_stale(_result(probes=["lazy-init", "stale-padding"]), tmp_path) == []
    assert sorted(lifecycle.prune_stale(_result(), tmp_path)) == sorted([rm, te])


def test_a_check_that_never_searched_removes_nothing(tmp_path, replays):
    kept = write(FindingKind.LAZY_INIT, tmp_path)
    capture = make_finding(FindingKind.CAPTURE_FAILURE)
    result = _result(capture, calls=0)  # the capture failed: no example ran, nothing was looked for
    write_reports(result, tmp_path)
    assert kept.is_dir() and Path(capture.report_dir).is_dir()
    assert result.notes == [] and replays.calls == []


def test_other_targets_and_foreign_directories_are_kept(tmp_path, replays):
    other = write(FindingKind.LAZY_INIT, tmp_path, target="backend.attn:OtherBackend")
    same_slug = write(FindingKind.LAZY_INIT, tmp_path, target="backend.attn_FlashBackend")  # same folder name
    foreign = tmp_path / "backend.attn_FlashBackend" / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("mine")
    assert same_slug.parent == foreign.parent
    assert lifecycle.prune_stale(_result(), tmp_path) == []
    assert other.is_dir() and same_slug.is_dir() and (foreign / "todo.txt").read_text() == "mine"
    assert replays.calls == []


def test_removal_is_atomic_a_failure_leaves_the_report_whole(tmp_path, monkeypatch, replays):
    path = write(FindingKind.LAZY_INIT, tmp_path)
    before = _snapshot(path)

    def refuse(src, dst):
        raise PermissionError(13, "read-only", str(src))

    monkeypatch.setattr(atomic.os, "rename", refuse)
    result = _result()
    assert lifecycle.prune_stale(result, tmp_path) == []
    monkeypatch.undo()
    assert _snapshot(path) == before
    assert result.notes and result.notes[0].startswith("stale report ") and "not removed" in result.notes[0]
    assert leftovers(path.parent) == []


class Toggle(plain_torch.Safe):
    """stale-pointer while BUGGY is set (rebinds a buffer the graph reads), correct once it is not."""

    BUGGY = True

    def prepare(self, batch):
        super().prepare(batch)
        if Toggle.BUGGY:
            self.lens = self.lens.clone()


def _check_toggle(root: Path) -> CheckResult:
    return graphsafe.check(Toggle, engine="emulate", examples=10, seed=0, database=False, report_dir=root)


def test_a_check_after_the_fix_removes_the_report_of_the_fixed_bug(tmp_path, monkeypatch):
    buggy = _check_toggle(tmp_path)
    assert buggy.kinds == {"stale-pointer"}, buggy.summary()
    report = Path(buggy.findings[0].report_dir)
    monkeypatch.setattr(Toggle, "BUGGY", False)
    fixed = _check_toggle(tmp_path)
    assert fixed.ok, fixed.summary()
    assert not report.exists()
    assert [n for n in fixed.notes if n.startswith("removed stale report")] == [
        f"removed stale report {display_path(report)}{FIXED}"
    ]


def _copy_as(report: Path, where: str, cause: str) -> Path:
    """A copy of ``report`` as another search would have named its bug (``where``, ``cause``)."""
    other = report.parent / "stale-pointer-0123abcd"
    shutil.copytree(report, other)
    data = json.loads((other / "finding.json").read_text())
    (other / "finding.json").write_text(
        json.dumps({**data, "where": where, "cause": cause, "key": [data["key"][0], data["kind"], where]})
    )
    return other


def test_a_check_replaces_the_report_of_the_same_cause_named_at_another_place(tmp_path):
    report = Path(_check_toggle(tmp_path).findings[0].report_dir)
    cause = json.loads((report / "finding.json").read_text())["cause"]
    other = _copy_as(report, "self.lens (as an earlier search named it)", cause=cause)
    again = _check_toggle(tmp_path)
    assert report.is_dir() and not other.exists()
    assert f"replaced report {display_path(other)} by {display_path(report)}" in "\n".join(again.notes)


def test_a_report_that_named_the_cause_otherwise_is_replayed_then_replaced_and_all_go_after_the_fix(
    tmp_path, monkeypatch
):
    report = Path(_check_toggle(tmp_path).findings[0].report_dir)
    # the same bug as an older graphsafe named it (another place, another cause): only its replay tells
    other = _copy_as(report, "self.lens (as an earlier search named it)", cause="buffer:self.old_lens")
    again = _check_toggle(tmp_path)
    assert again.kinds == {"stale-pointer"} and Path(again.findings[0].report_dir) == report
    assert not other.exists()
    assert (
        f"replaced report {display_path(other)} by {display_path(report)}: its recorded steps still fail, "
        "with the same cause" in again.notes
    )
    _copy_as(report, "self.lens (as an earlier search named it)", cause="buffer:self.old_lens")
    monkeypatch.setattr(Toggle, "BUGGY", False)
    fixed = _check_toggle(tmp_path)
    assert fixed.ok and not report.exists() and not other.exists()


# == re-running ================================================================================
def test_an_equivalent_rewrite_leaves_every_file_untouched(tmp_path, monkeypatch):
    first = make_finding(FindingKind.STALE_POINTER, seconds_to_find=1.25, examples_to_find=7)
    path = graphsafe.reports.write_report(first, tmp_path)
    before = _snapshot(path)
    again = make_finding(
        FindingKind.STALE_POINTER,
        seconds_to_find=9.5,
        examples_to_find=1,  # another search effort
        message=first.message.replace("0x7f0010", "0x55aa00").replace("0x7f0400", "0x55ab00"),  # other addresses
        details={"dead": [{**first.details["dead"][0], "address": "0x55aa00"}]},
    )
    monkeypatch.setattr(
        environment,
        "environment",
        lambda: {  # another machine's versions
            "python": "3.99.0",
            "torch": "9.9.9",
            "triton": None,
            "graphsafe": "9.9",
            "cuda": None,
            "gpu": "none (CPU)",
            "platform": "elsewhere",
        },
    )
    assert graphsafe.reports.write_report(again, tmp_path) == path
    assert _snapshot(path) == before
    assert leftovers(path.parent) == []


def test_a_report_written_under_another_root_counts_as_the_same(tmp_path):
    a, b = write(FindingKind.LAZY_INIT, tmp_path / "a"), write(FindingKind.LAZY_INIT, tmp_path / "b")
    assert str(a) in (a / "report.md").read_text() and str(b) in (b / "report.md").read_text()  # paths differ
    assert lifecycle.same_report(b, a)  # ... and are ignored
    assert not lifecycle.same_report(b, tmp_path / "nowhere")


def test_a_real_change_rewrites_the_report(tmp_path):
    path = write(FindingKind.STALE_PADDING, tmp_path)
    before = _snapshot(path)
    write(FindingKind.STALE_PADDING, tmp_path, message="padded slots 2..3 keep stale values elsewhere")
    after = _snapshot(path)
    assert after["finding.json"][0] != before["finding.json"][0]
    assert "elsewhere" in json.loads(after["finding.json"][0])["message"]


def test_a_report_missing_a_file_is_rewritten_whole(tmp_path):
    path = write(FindingKind.STALE_PADDING, tmp_path)
    (path / "diff.png").unlink()
    write(FindingKind.STALE_PADDING, tmp_path)
    assert (path / "diff.png").is_file()


VOLATILE = {  # "file: what" -> two texts that differ only in what a rerun may change
    "report.md: search effort": [
        "**Found after:** 7 example(s) (1.2 s)  \n",
        "**Found after:** 1 example(s) (30.5 s)  \n",
    ],
    "report.md: environment": [
        "## Environment\n\n| torch | 2.13 |\n\n## How to fix\n",
        "## Environment\n\n| torch | 2.14 |\n\n## How to fix\n",
    ],
    "repro.py: version, paths": [
        "# Written by graphsafe 0.1.0.\npython /home/a/reports/x/repro.py\n",
        "# Written by graphsafe 0.2.0.\npython /tmp/b/reports/x/repro.py\n",
    ],
    "finding.json: addresses, search effort": [
        '{"message": "at 0x7f00", "seconds_to_find": 1.0, "examples_to_find": 3}',
        '{"message": "at 0x1234", "seconds_to_find": 2.0, "examples_to_find": 1}',
    ],
}
MEANINGFUL = {  # "file: what" -> two texts that say different things
    "report.md: where": ["**Where:** `self.a`\n## How to fix\n", "**Where:** `self.b`\n## How to fix\n"],
    "report.md: fix": ["## How to fix\n\nZero it.\n", "## How to fix\n\nZero them.\n"],
    "repro.py: steps": ["steps = [1]\n", "steps = [2]\n"],
    "finding.json: step": ['{"message": "at 0x7f00", "step": 1}', '{"message": "at 0x7f00", "step": 2}'],
    "diff.png: pixels": ["\x89PNG-a", "\x89PNG-b"],
}


@pytest.mark.parametrize("name, same", [(n, True) for n in VOLATILE] + [(n, False) for n in MEANINGFUL])
def test_what_counts_as_volatile(name, same):
    a, b = (VOLATILE if same else MEANINGFUL)[name]
    file = name.split(":")[0]
    assert (lifecycle.normalised(file, a.encode()) == lifecycle.normalised(file, b.encode())) is same


def test_rerunning_the_same_check_leaves_the_report_untouched(tmp_path):
    def check():
        return graphsafe.check(
            plain_torch.Fresh, engine="emulate", examples=10, seed=0, database=False, report_dir=tmp_path
        )

    first = check()
    path = Path(first.findings[0].report_dir)
    before = _snapshot(path)
    second = check()
    assert Path(second.findings[0].report_dir) == path
    assert _snapshot(path) == before
    assert not [n for n in second.notes if "stale report" in n]

"""How findings name a place in the target's own code: paths relative to the current directory below it."""

import os

from graphsafe.engines.userframe import display_path


def test_a_file_below_the_current_directory_is_named_relative_to_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert display_path(str(tmp_path / "pkg" / "backend.py")) == os.path.join("pkg", "backend.py")


def test_a_file_outside_the_current_directory_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert display_path(str(tmp_path / "backend.py")) == str(tmp_path / "backend.py")


def test_the_name_follows_a_change_of_the_current_directory(tmp_path, monkeypatch):
    target = tmp_path / "a" / "backend.py"
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path)
    assert display_path(str(target)) == os.path.join("a", "backend.py")
    monkeypatch.chdir(tmp_path / "a")
    assert display_path(str(target)) == "backend.py", "a name remembered for one directory is not reused in another"


def test_a_relative_file_name_is_read_from_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert display_path("backend.py") == "backend.py"
    assert display_path("../elsewhere.py") == str(tmp_path.parent / "elsewhere.py")

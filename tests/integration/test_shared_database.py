"""A shared example database (graphsafe/checker/database.py): a failure one process found is the first
example another process runs, through a directory or a real Redis server (Hypothesis' own databases).

Each run is a fresh Python process on the emulator, as on two machines of a CI matrix, under
graphsafe's ``ci`` profile (derandomised, so every search draws the same examples; it keeps no
database of its own: a named one is used all the same).  ``Rare`` reads a host value that the graph
freezes, different only on a step of two sequences of length 7, so a search of its own meets it only
after several examples.  No seed: Hypothesis' ``@seed`` turns the database off.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphsafe import UsageError
from graphsafe.checker import database
from tests.subprocesses import env_with_repo
from tests.targets.plain_torch import SOURCE

RARE = (
    SOURCE
    + '''

class Rare(Safe):
    """frozen-host-value: a Python float the graph keeps from capture, different only on a step of two
    sequences of length 7."""

    expected = "frozen-host-value"
    scale = 1.0

    def prepare(self, batch):
        super().prepare(batch)
        self.scale = 2.0 if len(batch.seq_lens) == 2 and min(batch.seq_lens) == 7 else 1.0

    def forward(self):
        torch.mul(self.x, self.lens[:, None] * self.scale, out=self.out)
        return self.out
'''
)

CHECK = """
import json, sys
import graphsafe
from hypothesis import settings
from graphsafe.frontend.profiles import register_profiles
from rare import Rare

database = {"none": False, "env": None}[sys.argv[1]]
register_profiles()
settings.load_profile("graphsafe-ci")
r = graphsafe.check(Rare, engine="emulate", examples=60, steps=2, capture="worst", database=database)
print(json.dumps({"kinds": [f.kind.value for f in r.findings], "examples": r.examples}))
"""


def check(tmp_path: Path, db: str | None) -> dict:
    """One check of ``Rare`` in a fresh process; ``db``: ``$GRAPHSAFE_DB`` (None: no database at all)."""
    env = env_with_repo()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    if db is not None:
        env["GRAPHSAFE_DB"] = db
    out = subprocess.run(
        [sys.executable, "-c", CHECK, "env" if db is not None else "none"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def redis_url(tmp_path: Path):
    """A Redis server of this test's own on a free port, keeping nothing on disk; skips without one."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server binary on PATH (install Redis, e.g. apt-get install redis-server, to run this)")
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'graphsafe[redis]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        client = redis.Redis.from_url(url)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert server.poll() is None, "redis-server exited at start"
                time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_failure_found_by_one_process_is_the_first_example_of_the_next_through_redis(tmp_path, redis_url):
    (tmp_path / "rare.py").write_text(RARE)
    alone = check(tmp_path, None)
    assert alone["kinds"] == ["frozen-host-value"] and alone["examples"] > 1  # a search of its own takes a while
    assert check(tmp_path, redis_url) == alone  # the first machine: the same search, and it saves what it found
    assert check(tmp_path, redis_url) == {"kinds": ["frozen-host-value"], "examples": 1}


def test_a_failure_found_by_one_process_is_the_first_example_of_the_next_through_a_directory(tmp_path):
    (tmp_path / "rare.py").write_text(RARE)
    shared = str(tmp_path / "shared-db")
    assert check(tmp_path, shared)["examples"] > 1
    assert check(tmp_path, shared) == {"kinds": ["frozen-host-value"], "examples": 1}


def test_a_redis_url_without_the_redis_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis fails as where it is not installed
    database._redis.cache_clear()
    with pytest.raises(
        UsageError, match=r"redis package is not installed; install it \(pip install 'graphsafe\[redis\]'"
    ):
        database.example_database("flex-emulate-worst-all", "redis://127.0.0.1:1/0")
    database._redis.cache_clear()


def test_a_redis_server_that_cannot_be_reached_is_a_usage_error_before_the_search():
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'graphsafe[redis]')")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    database._redis.cache_clear()
    with pytest.raises(UsageError, match="cannot reach the Redis server"):
        database.example_database("flex-emulate-worst-all", f"redis://127.0.0.1:{port}/0")
    database._redis.cache_clear()


def test_the_environment_names_the_database_and_the_option_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHSAFE_DB", str(tmp_path / "from-env"))
    assert database.location(None) == str(tmp_path / "from-env")
    assert database.location(str(tmp_path / "given")) == str(tmp_path / "given")
    assert database.location(False) is False
    db = database.example_database("flex/emulate worst", None)
    assert db is not None and Path(db.path) == tmp_path / "from-env" / "flex_emulate_worst"


def test_the_command_line_takes_the_database_as_an_option(tmp_path):
    (tmp_path / "rare.py").write_text(RARE)
    env = env_with_repo()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    cmd = [sys.executable, "-m", "graphsafe", "check", "rare:Rare", "--engine", "emulate", "--examples", "60"]
    cmd += ["--steps", "2", "--capture", "worst", "--profile", "ci", "--database", str(tmp_path / "cli-db")]
    found = []
    for run in ("first", "second"):  # each writes its report to a folder of its own
        done = subprocess.run(
            [*cmd, "--report-dir", str(tmp_path / run)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 1, done.stderr
        (report,) = (tmp_path / run).rglob("finding.json")
        found.append(json.loads(report.read_text())["examples_to_find"])
    assert found[0] > 1 and found[1] == 1  # the second run's first example is the failure the first saved

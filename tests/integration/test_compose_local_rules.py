"""The rules scripts/compose-local reads the compose file by: interpolation and the local rewrite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))

from composelocal.__main__ import closing_line  # noqa: E402
from composelocal.commands import simple_commands  # noqa: E402
from composelocal.compose import ComposeError, interpolate  # noqa: E402
from composelocal.remap import PortMap, Rewriter  # noqa: E402


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("${A-x}", {}, "x"),
        ("${A-x}", {"A": ""}, ""),  # '-': only an unset variable takes the default
        ("${A:-x}", {"A": ""}, "x"),  # ':-': an empty one too
        ("${A?gone}", {"A": ""}, ""),
        ("$$(seq 3) $A", {"A": "v"}, "$(seq 3) v"),
        ("u=${A}@h", {"A": "me"}, "u=me@h"),
    ],
)
def test_interpolation_follows_compose(text: str, env: dict[str, str], expected: str) -> None:
    assert interpolate(text, env) == expected


def test_a_required_variable_names_itself_when_unset() -> None:
    with pytest.raises(ComposeError, match="A is required: set A"):
        interpolate("${A?set A}", {})
    with pytest.raises(ComposeError, match="A is required"):
        interpolate("${A:?set A}", {"A": ""})


def rewriter() -> Rewriter:
    mapped = {
        ("meta", 8248): 41000,
        ("pump-1", 8250): 41001,
        ("pump-1", 8251): 41002,
        ("spark-master", 7077): 41003,
    }
    ports = PortMap(mapped, frozenset({"meta", "pump-1", "spark-master"}))
    return Rewriter("pump-1", ports, {"/etc/bridge/pump.toml": "/run/pump.toml", "/var/lib/bridge": "/run/v"})


def test_hosts_ports_and_paths_become_local() -> None:
    local = rewriter()
    assert local.text('addr = "0.0.0.0:8250"\nmeta = "meta:8248"') == (
        'addr = "127.0.0.1:41001"\nmeta = "127.0.0.1:41000"'
    )
    assert local.text("http://127.0.0.1:8251/status") == "http://127.0.0.1:41002/status"
    assert local.text('data-dir = "/var/lib/bridge/pump"') == 'data-dir = "/run/v/pump"'
    assert local.text("schema-registry:8081 unknown:9") == "schema-registry:8081 unknown:9"  # not run here
    assert local.argv(["--config", "/etc/bridge/pump.toml", "--port", "8250", "--host", "meta", "meta"]) == [
        "--config", "/run/pump.toml", "--port", "41001", "--host", "127.0.0.1", "meta",
    ]  # fmt: skip
    assert local.text('"spark.ui.port" = "8251"') == '"spark.ui.port" = "41002"'


def test_shell_scripts_split_into_simple_commands() -> None:
    script = "for i in $(seq 2); do binlog-bridge diff --quiet > /dev/null 2>&1 && break; sleep 2; done;"
    script += " x | grep ."
    assert simple_commands(["sh", "-ec", script]) == [
        ["i", "in", "$(seq", "2)"], ["binlog-bridge", "diff", "--quiet"], ["break"], ["sleep", "2"], ["x"],
        ["grep", "."],
    ]  # fmt: skip
    assert simple_commands(["binlog-bridge", "meta"]) == [["binlog-bridge", "meta"]]


def _sqlite(path: Path, rows: list[tuple[int, str]]) -> str:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT)")
        db.executemany("INSERT INTO item VALUES (?, ?)", rows)
    return f"sqlite:///{path}"


@pytest.mark.parametrize(("downstream_rows", "status"), [([(1, "a"), (2, "b")], 0), ([(1, "a")], 1)])
def test_compose_local_exits_with_verifys_status(
    tmp_path: Path, downstream_rows: list[tuple[int, str]], status: int
) -> None:
    """A file of one service, verify: compose-local runs its command and returns what it returned."""
    upstream = _sqlite(tmp_path / "up.db", [(1, "a"), (2, "b")])
    downstream = _sqlite(tmp_path / "down.db", downstream_rows)
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(
        "services:\n  verify:\n    build: .\n    restart: 'no'\n"
        f"    command: [binlog-bridge, diff, --upstream, '{upstream}', --downstream, '${{DOWN}}']\n"
    )
    env = {**os.environ, "DOWN": downstream}
    done = subprocess.run(
        [str(ROOT / "scripts" / "compose-local"), "--file", str(compose), "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == status, done.stderr
    assert ("equal (1 tables" in done.stdout) == (status == 0), done.stdout
    assert f"compose-local: verify exited {status}" in done.stderr


def test_compose_local_names_a_required_variable_left_unset(tmp_path: Path) -> None:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(
        "services:\n  verify:\n    build: .\n    command: [binlog-bridge, '${NOPE?set NOPE}']\n"
    )
    done = subprocess.run(
        [str(ROOT / "scripts" / "compose-local"), "--file", str(compose)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "variable NOPE is required: set NOPE" in done.stderr


def test_the_last_line_says_whether_the_run_folder_is_still_there(tmp_path: Path) -> None:
    assert closing_line(1, 12.4, tmp_path, removed=False) == (
        f"verify exited 1 after 12s; run folder {tmp_path} kept"
    )
    assert closing_line(0, 3.0, tmp_path, removed=True) == (
        f"verify exited 0 after 3s; run folder {tmp_path} removed (--keep keeps it)"
    )

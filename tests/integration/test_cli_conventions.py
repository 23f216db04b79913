"""Conventions every ``binlog-bridge`` command keeps (docs/operations.md, "Exit status
and error lines"): a closed stdout ends it quietly (141, no traceback); exit 3 when a
dependency does not answer, 2 for usage and configuration errors, 1 when the work
failed or found a difference; errors are one ``binlog-bridge COMMAND: error: ...`` line.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_consume import ContractWriter, write_history
from tests.support.process import bridge_cli, free_port

HANG_GUARD = 120


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run a command whose stdout is a pipe nobody reads any more (`| head` after its line)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            bridge_cli(*args), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD
        )
    finally:
        os.close(write_end)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(bridge_cli(*args), capture_output=True, text=True, timeout=HANG_GUARD)


def sqlite_db(path: Path, rows: int) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"n{i}") for i in range(rows)])
    return f"sqlite:///{path}"


def assert_quiet(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode in (0, 141), result.stderr  # argparse's --help ignores the error: 0
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr


def test_listings_into_a_closed_pipe_end_quietly(meta_addr: str, tmp_path: Path) -> None:
    assert_quiet(into_closed_pipe("ctl", "--meta", meta_addr, "nodes", "--output", "json"))
    assert_quiet(into_closed_pipe("ctl", "--meta", meta_addr, "tso"))
    assert_quiet(into_closed_pipe("--help"))
    up, down = sqlite_db(tmp_path / "up.db", 3), sqlite_db(tmp_path / "down.db", 3)
    assert_quiet(into_closed_pipe("diff", "--upstream", up, "--downstream", down))


def test_consume_into_a_closed_pipe_ends_quietly(kafka_bootstrap: str, unique_name: str) -> None:
    writer = ContractWriter(kafka_bootstrap, unique_name)
    write_history(writer)
    result = into_closed_pipe(
        "consume", "--bootstrap-servers", kafka_bootstrap, "--topic", writer.topic, "--from-beginning",
        "--until-ts", "170", "--idle-timeout", "30",
    )  # fmt: skip
    assert_quiet(result)


def assert_error_line(result: subprocess.CompletedProcess[str], command: str, status: int) -> None:
    assert result.returncode == status, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"binlog-bridge {command}: error: "), result.stderr


def test_an_unreachable_dependency_exits_3_with_one_error_line(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    config = tmp_path / "capture.toml"
    config.write_text(
        f'[capture]\nupstream = "mysql://root@{nobody}/"\nmeta = "{nobody}"\n'
        f'data-dir = "{tmp_path / "capture"}"\ndatabases = ["shop"]\nstatus-addr = "127.0.0.1:0"\n'
    )
    up = sqlite_db(tmp_path / "up.db", 1)
    drainer = ("--meta", nobody, "--data-dir", str(tmp_path / "d"), "--addr", "127.0.0.1:0")
    commands = [
        ("ctl", "--meta", nobody, "--connect-timeout", "2", "nodes"),
        ("load", "--meta", nobody, "--upstream", f"sqlite:///{tmp_path}/u.db"),
        ("diff", "--upstream", up, "--downstream", f"mysql://root@{nobody}/x"),
        ("consume", "--bootstrap-servers", nobody, "--prefix", "p"),
        ("capture", "--config", str(config)),
        ("drainer", *drainer, "--status-addr", "127.0.0.1:0"),
    ]
    running = [  # each waits for its own connect timeout: run them side by side
        subprocess.Popen(bridge_cli(*c), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c in commands
    ]
    for command, proc in zip(commands, running, strict=True):
        stdout, stderr = proc.communicate(timeout=HANG_GUARD)
        assert_error_line(
            subprocess.CompletedProcess(command, proc.returncode, stdout, stderr), command[0], 3
        )


@pytest.mark.parametrize(
    "args",
    [
        ("ctl", "--meta", "127.0.0.1:1", "nodes", "--no-such-flag"),
        ("diff", "--upstream", "sqlite:///x.db"),
        ("consume", "--bootstrap-servers", "127.0.0.1:1", "--prefix", "p", "--apply", "postgres://x"),
        ("drainer", "--config", "/nonexistent/drainer.toml"),
    ],
)
def test_usage_and_configuration_errors_exit_2(args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]  # argparse names the parser that saw the flag
    assert last.startswith(("binlog-bridge: error: ", f"binlog-bridge {args[0]}: error: ")), last
    assert "Traceback" not in result.stderr


def test_a_difference_exits_1(tmp_path: Path) -> None:
    up, down = sqlite_db(tmp_path / "up.db", 3), sqlite_db(tmp_path / "down.db", 2)
    result = run("diff", "--quiet", "--upstream", up, "--downstream", down)
    assert result.returncode == 1 and "DIFFERENT" in result.stdout, result.stdout

"""``binlog-bridge diff`` never says equal about what it did not compare (issue 18).

A ``--tables`` entry matching nothing, a database that does not exist, or no
table at all is an error (exit 2) naming what was not found; a table that only
one side holds is reported with that side's real row count.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pymysql
import pytest

from bridge.dsn import parse_dsn

ROOT = Path(__file__).resolve().parents[2]
DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_DSN = "mysql://root@127.0.0.1:3306/"


def sqlite_db(path: Path, *tables: tuple[str, int]) -> str:
    """A SQLite file holding ``tables`` (name, row count); its DSN."""
    conn = sqlite3.connect(path)
    for name, rows in tables:
        conn.execute(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany(f"INSERT INTO {name} VALUES (?, ?)", [(i, f"v{i}") for i in range(rows)])
    conn.commit()
    conn.close()
    return f"sqlite://{path}"


def run_diff(up: str, down: str, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "bridge.cli", "diff", "--upstream", up, "--downstream", down, "--quiet"]
    return subprocess.run([*command, *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_table_filter_matching_nothing_is_an_error_naming_it(tmp_path: Path) -> None:
    up = sqlite_db(tmp_path / "up.db", ("load_accounts", 30))
    down = sqlite_db(tmp_path / "down.db", ("load_accounts", 30))
    typo = run_diff(up, down, "--tables", "load_acounts")
    assert typo.returncode == 2, typo.stdout + typo.stderr
    assert "'load_acounts'" in typo.stderr and "equal" not in typo.stdout
    # One good entry does not hide a bad one.
    partly = run_diff(up, down, "--tables", "load_accounts,main.nosuch")
    assert partly.returncode == 2 and "'main.nosuch'" in partly.stderr
    assert "'load_accounts'" not in partly.stderr
    good = run_diff(up, down, "--tables", "load_accounts")
    assert good.returncode == 0 and "main.load_accounts: equal (30 rows" in good.stdout


def test_no_table_at_all_is_an_error(tmp_path: Path) -> None:
    up = sqlite_db(tmp_path / "up.db")
    down = sqlite_db(tmp_path / "down.db")
    empty = run_diff(up, down)
    assert empty.returncode == 2, empty.stdout + empty.stderr
    assert "no table to compare" in empty.stderr and empty.stdout == ""


def test_a_table_on_one_side_only_shows_its_real_row_count(tmp_path: Path) -> None:
    up = sqlite_db(tmp_path / "up.db", ("both", 5), ("only_up", 17))
    down = sqlite_db(tmp_path / "down.db", ("both", 5), ("only_down", 4))
    result = run_diff(up, down)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "main.only_up: DIFFERENT: the table exists only upstream (17 rows)" in lines
    assert "main.only_down: DIFFERENT: the table exists only downstream (4 rows)" in lines
    assert "missing, 0 extra" not in result.stdout  # no row counts that say nothing is missing
    assert "(3 tables, 22 upstream rows," in lines[-1]


def test_each_table_is_reported_once_on_a_terminal(tmp_path: Path) -> None:
    """Without --quiet, stdout and stderr both reach the terminal: each table's result shows once."""
    up = sqlite_db(tmp_path / "up.db", ("same", 5), ("short", 3))
    down = sqlite_db(tmp_path / "down.db", ("same", 5), ("short", 2))
    command = [sys.executable, "-m", "bridge.cli", "diff", "--upstream", up, "--downstream", down]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    both = result.stdout + result.stderr
    assert both.count("main.same: equal") == 1, both
    assert both.count("main.short: DIFFERENT") == 1, both


@pytest.mark.mysql
def test_a_database_that_does_not_exist_is_an_error_naming_it(tmp_path: Path, unique_name: str) -> None:
    server = parse_dsn(os.environ.get(DSN_ENV, DEFAULT_DSN))
    conn = pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password, autocommit=True
    )
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{unique_name}`")
            cur.execute(f"CREATE TABLE `{unique_name}`.t (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO `{unique_name}`.t VALUES (1), (2), (3)")
        base = f"mysql://{server.user}@{server.host}:{server.port}"
        up = f"{base}/{unique_name}"
        missing = run_diff(up, f"{base}/{unique_name}_nosuch")
        assert missing.returncode == 2, missing.stdout + missing.stderr
        assert f"database '{unique_name}_nosuch' does not exist" in missing.stderr
        reversed_sides = run_diff(f"{base}/{unique_name}_nosuch", up)
        assert reversed_sides.returncode == 2 and "does not exist" in reversed_sides.stderr
        # Against an existing but empty database the upstream's rows are counted, not 0.
        empty_db = sqlite_db(tmp_path / "empty.db", ("other", 1))
        against_empty = run_diff(up, empty_db, "--tables", "t")
        assert against_empty.returncode == 1
        assert f"{unique_name}.t: DIFFERENT: the table exists only upstream (3 rows)" in against_empty.stdout
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")
        conn.close()

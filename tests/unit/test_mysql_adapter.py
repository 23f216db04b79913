"""bridge.mysql: the one table of retriable error numbers, error translation, quoting, and
the bounded waits every connection gets (no server: the arguments handed to pymysql)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pymysql.err
import pytest

from bridge import mysql
from bridge.dsn import parse_dsn
from bridge.errors import ConfigError, DatabaseError, DatabaseUnavailable
from bridge.sink.errors import SinkApplyError, SinkUnavailable
from drainer.sinks.mysql.connection import translate_error

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("bridge", "pump", "drainer", "spark_consumers", "bench")


@pytest.mark.parametrize("code", [1290, 1836, 1927, 1317, 1213, 1205, 2013, 2006, 8002, 9007, 8027])
def test_switchover_kill_conflict_and_tidb_codes_are_retriable(code: int) -> None:
    exc = pymysql.err.OperationalError(code, "text")
    assert mysql.is_retriable(exc)
    translated = mysql.translate(exc, "where")
    assert isinstance(translated, DatabaseUnavailable) and translated.retriable
    assert translated.code == code
    assert str(translated) == f"where: MySQL error {code}: text"
    assert isinstance(translate_error(exc, "sink"), SinkUnavailable)


@pytest.mark.parametrize("code", [1146, 1054, 1062, 1452, 1406, 1045])
def test_errors_of_the_statement_or_schema_are_not(code: int) -> None:
    exc = pymysql.err.ProgrammingError(code, "no")
    assert not mysql.is_retriable(exc)
    translated = mysql.translate(exc, "where")
    assert type(translated) is DatabaseError and not translated.retriable
    assert isinstance(translate_error(exc, "sink"), SinkApplyError)


def test_socket_errors_and_numberless_connection_errors_are_retriable() -> None:
    assert mysql.is_retriable(TimeoutError("timed out"))
    assert mysql.is_retriable(ConnectionResetError())
    assert mysql.is_retriable(pymysql.err.InterfaceError("closed"))
    assert mysql.error_code(pymysql.err.InterfaceError("closed")) is None


def test_every_retriable_code_says_why_and_conflicts_are_among_them() -> None:
    assert all(reason.strip() for reason in mysql.RETRIABLE_CODES.values())
    assert mysql.RETRIABLE_CODES.keys() >= mysql.CONFLICT_CODES


def test_the_product_has_one_table_of_retriable_mysql_codes() -> None:
    """No module but bridge/mysql.py lists the deadlock and lost-connection numbers together (the
    three tables of issue 25 disagreed: the checkpoint's lacked the read-only and killed codes)."""
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            numbers = set(re.findall(r"\b\d{4}\b", path.read_text(encoding="utf-8")))
            if {"1213", "2013"} <= numbers:
                found.append(str(path.relative_to(ROOT)))
    assert found == ["bridge/mysql.py"]


def test_identifiers_are_backquoted_with_backquotes_doubled() -> None:
    assert mysql.quote_identifier("shop") == "`shop`"
    assert mysql.quote_identifier("we`ird") == "`we``ird`"


def connect_args(monkeypatch: pytest.MonkeyPatch, dsn: str, **kwargs: Any) -> dict[str, Any]:
    """What mysql.connect hands pymysql (its connection class replaced by a recorder)."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(mysql, "_connection_class", lambda: lambda **args: seen.update(args))
    mysql.connect(parse_dsn(dsn), **kwargs)
    return seen


def test_every_connection_gets_bounded_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    args = connect_args(monkeypatch, "mysql://root@h/")
    assert (args["connect_timeout"], args["read_timeout"], args["write_timeout"]) == (10.0, 60.0, 60.0)
    timeouts = mysql.MySQLTimeouts(2, 3, 4)
    args = connect_args(monkeypatch, "mysql://root@h/", timeouts=timeouts, autocommit=True)
    assert (args["connect_timeout"], args["read_timeout"], args["write_timeout"]) == (2, 3, 4)
    assert args["autocommit"] is True
    args = connect_args(monkeypatch, "mysql://root@h/?read_timeout=7&write_timeout=8")
    assert (args["read_timeout"], args["write_timeout"]) == (7.0, 8.0)  # the DSN's win


def test_timeouts_are_validated_and_the_dsn_refuses_a_bad_one() -> None:
    with pytest.raises(ConfigError, match=r"x\.read-timeout"):
        mysql.MySQLTimeouts(read_timeout=-1).validate("x.")
    with pytest.raises(ConfigError, match="read_timeout must be a number of seconds"):
        parse_dsn("mysql://root@h/?read_timeout=soon")

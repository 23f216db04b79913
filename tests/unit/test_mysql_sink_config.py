"""MySQL sink configuration and error translation (no services)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pymysql
import pytest

from bridge.dsn import parse_dsn
from bridge.errors import ConfigError
from bridge.mysql import read_timeout, timed_out
from bridge.sink.errors import SinkApplyError, SinkUnavailable
from drainer.config import config_from_dict
from drainer.sinks.mysql.connection import ConnectSettings, redact, timeout_error, translate_error
from drainer.sinks.mysql.sink import MySQLSink

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_the_password_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_SINK_MYSQL_PASSWORD", "s3cret")
    sink = MySQLSink({"dsn": "mysql://bridge@db.example:3307/"}, Path("/nonexistent"))
    config = sink.config
    assert (config.worker_count, config.batch_rows, config.txn_rows) == (16, 500, 4096)
    assert (config.safe_mode, config.safe_mode_duration, config.retry_max) == (False, 60.0, 10.0)
    assert config.progress_schema == "bridge"
    assert sink.dsn.password == "s3cret" and "s3cret" not in sink.dsn.redacted()
    assert (sink.dsn.host, sink.dsn.port, sink.dsn.user) == ("db.example", 3307, "bridge")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "sink.mysql.dsn: required"),
        ({"dsn": "sqlite:///x.db"}, "sink.mysql.dsn"),
        ({"dsn": "mysql://a:pw@h/", "worker-count": 0}, "sink.mysql.worker-count"),
        ({"dsn": "mysql://a:pw@h/", "batch-rows": 0}, "sink.mysql.batch-rows"),
        ({"dsn": "mysql://a:pw@h/", "txn-rows": 0}, "sink.mysql.txn-rows"),
        ({"dsn": "mysql://a:pw@h/", "safe-mode-duration": "soon"}, "sink.mysql.safe-mode-duration"),
        ({"dsn": "mysql://a:pw@h/", "progress-schema": "a`b"}, "sink.mysql.progress-schema"),
        ({"dsn": "mysql://a:pw@h/", "workers": 3}, "workers"),
    ],
)
def test_invalid_settings_name_their_key_and_never_the_password(
    table: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as failure:
        MySQLSink(table, Path("/nonexistent"))
    assert message in str(failure.value) and "pw" not in str(failure.value)


def test_errors_are_sorted_into_retriable_and_not_and_lose_their_values() -> None:
    where = "mysql sink: commit_ts 5: table d.t"
    deadlock = translate_error(pymysql.err.OperationalError(1213, "Deadlock found"), where)
    gone = translate_error(pymysql.err.OperationalError(2013, "Lost connection"), where)
    killed = translate_error(pymysql.err.InterfaceError(0, ""), where)
    broken = translate_error(BrokenPipeError(32, "Broken pipe"), where)
    assert all(isinstance(e, SinkUnavailable) and e.retriable for e in (deadlock, gone, killed, broken))
    duplicate = translate_error(
        pymysql.err.IntegrityError(1062, "Duplicate entry 'alice@x' for key 'uk_mail'"),
        where,
        "INSERT ... (%s)",
    )
    assert isinstance(duplicate, SinkApplyError) and not duplicate.retriable
    assert str(duplicate) == (
        "mysql sink: commit_ts 5: table d.t: the downstream refused the change: (1062) Duplicate entry '…' "
        "for key 'uk_mail'; statement: INSERT ... (%s)"
    )
    assert redact("Incorrect integer value: 'abc' for column `d`.`t`.`n` at row 1") == (
        "Incorrect integer value: '…' for column `d`.`t`.`n` at row 1"
    )
    assert redact("Data too long for column 'name' at row 3") == "Data too long for column 'name' at row 3"


def test_the_example_drainer_config_loads_and_builds_the_sink() -> None:
    data = tomllib.loads((ROOT / "docs" / "examples" / "drainer-mysql.toml").read_text())
    config = config_from_dict(data)
    assert config.sink.types == ["mysql"] and config.checkpoint.type == "mysql"
    sink = MySQLSink(config.sink.tables["mysql"], Path(config.data_dir))
    assert sink.config.read_timeout == 120.0 and sink.config.ddl_read_timeout == 3600.0
    assert sink.config.worker_count == 16


def test_a_timed_out_read_is_named_with_the_timeout_that_applied() -> None:
    try:
        try:
            raise TimeoutError("timed out")
        except OSError as exc:  # as pymysql wraps a socket timeout
            raise pymysql.err.OperationalError(2013, f"Lost connection to MySQL server during query ({exc})")  # noqa: B904 - pymysql raises it so
    except pymysql.err.OperationalError as caught:
        lost = caught
    assert timed_out(lost) and not timed_out(pymysql.err.OperationalError(2013, "Lost connection"))
    dsn = parse_dsn("mysql://root@127.0.0.1:3306/?read_timeout=3", key="dsn")
    settings = ConnectSettings(dsn, 5, 120, 60, "", False)
    error = timeout_error(lost, "mysql sink worker 0: COMMIT", settings)
    assert isinstance(error, SinkUnavailable) and error.retriable
    assert "no answer within read-timeout 3s (write-timeout 60s)" in str(error)  # the DSN's wins


@pytest.mark.parametrize("key", ["read-timeout", "ddl-read-timeout"])
def test_timeouts_below_a_second_are_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=f"sink.mysql.{key}: at least 1s"):
        MySQLSink({"dsn": "mysql://root@127.0.0.1:3306/", key: "500ms"}, Path("/tmp"))


def test_read_timeout_applies_to_the_statements_inside_and_is_restored() -> None:
    class Conn:
        _read_timeout: float | None = 3.0

    conn = Conn()
    with read_timeout(conn, 3600):
        assert conn._read_timeout == 3600
    assert conn._read_timeout == 3.0
    with read_timeout(conn, 0):
        assert conn._read_timeout is None  # no limit
    assert conn._read_timeout == 3.0

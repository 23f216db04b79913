"""``binlog-bridge drainer`` with a relay log and no reachable meta service, as a real process.

The state a drainer SIGKILLed mid-batch leaves is built with the drainer's own parts:
the relay log holds every event (written by :class:`drainer.relay.RelaySink`), the
SQLite downstream holds only the first of them, the file checkpoint is below that
and not consistent. Started with the meta service unreachable, the drainer must
replay the relay log into the downstream, save a consistent checkpoint at the last
relayed commit_ts, remove the relay files and exit 0.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge.apps.demo import tomlfile
from bridge.sink.contract import SinkContext
from bridge.sink.events import Event
from drainer.checkpoint import CheckpointState
from drainer.checkpoint.file import FileCheckpoint
from drainer.relay.sink import RelaySink
from drainer.sinks.file.binlogfile import list_files
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.support.binlog_events import EventStream, table_schema
from tests.support.process import free_port
from tests.support.recording_sink import RecordingSink

CLUSTER = 6_982_000_000_000_000_001
HANG_GUARD = 120.0
PAD = "x" * 300  # so the relay log rotates every dozen events


def make_events(count: int) -> list[Event]:
    from bridge.proto import row_pb2

    types = row_pb2.ColumnType
    stream = EventStream()
    schema = table_schema("shop", "orders", [("id", types.BIGINT), ("note", types.TEXT)], key=["id"])
    events: list[Event] = [stream.create(schema)]
    for i in range(count):
        # Inserts, then every third row updated again in a later transaction.
        events.append(stream.inserts("shop.orders", [(i, f"order {i} {PAD}")]))
        if i % 3 == 2:
            before = (i - 1, f"order {i - 1} {PAD}")
            events.append(stream.txn([("update", "shop.orders", before, (i - 1, f"order {i - 1} paid"))]))
    return events


def crash_state(data_dir: Path, events: list[Event], applied: int, checkpoint_at: int) -> None:
    """Relay all events; the downstream has ``events[:applied]``; checkpoint at ``checkpoint_at``."""
    scratch = data_dir / "scratch"
    scratch.mkdir(parents=True)
    relay = RelaySink(RecordingSink({}, scratch), data_dir / "relay", 8192)
    relay.open(SinkContext(cluster_id=CLUSTER))
    relay.write(events)
    relay.close()
    sink = SQLiteSink({}, data_dir)
    sink.open(SinkContext())
    sink.write(events[:applied])
    assert sink.flush() == events[applied - 1].commit_ts
    sink.close()
    checkpoint = FileCheckpoint(data_dir / "checkpoint.json", CLUSTER)
    checkpoint.save(CheckpointState(events[checkpoint_at].commit_ts, b"", consistent=False))
    checkpoint.close()


def write_config(data_dir: Path, relay: bool = True) -> Path:
    table: dict[str, Any] = {
        "addr": f"127.0.0.1:{free_port()}",
        "status-addr": f"127.0.0.1:{free_port()}",
        "meta": f"127.0.0.1:{free_port()}",  # nothing listens there
        "data-dir": str(data_dir),
        "sink": {"type": "sqlite"},
    }
    if relay:
        table["relay"] = {"dir": "relay", "max-file-size": 8192}
    path = data_dir / "drainer.toml"
    path.write_text(tomlfile.dumps(table, "relay recovery test"), encoding="utf-8")
    return path


def run_drainer(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", "drainer", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )


def downstream_rows(data_dir: Path) -> list[tuple[int, str]]:
    conn = sqlite3.connect(data_dir / "sqlite" / "shop.db")
    try:
        return list(conn.execute("SELECT id, note FROM orders ORDER BY id"))
    finally:
        conn.close()


def expected_rows(count: int) -> list[tuple[int, str]]:
    rows = {i: f"order {i} {PAD}" for i in range(count)}
    for i in range(count):
        if i % 3 == 2:
            rows[i - 1] = f"order {i - 1} paid"
    return sorted(rows.items())


def test_unreachable_meta_replays_the_relay_log_and_exits_0(tmp_path: Path) -> None:
    events = make_events(60)
    crash_state(tmp_path, events, applied=50, checkpoint_at=30)
    assert len(list_files(tmp_path / "relay")) > 2
    assert downstream_rows(tmp_path) != expected_rows(60)
    result = run_drainer(write_config(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "relay recovery of cluster" in result.stderr and "consistent" in result.stderr
    assert "drainer ready" not in result.stderr  # it recovers and exits; it does not start
    assert downstream_rows(tmp_path) == expected_rows(60)
    checkpoint = FileCheckpoint(tmp_path / "checkpoint.json", CLUSTER)
    state = checkpoint.load()
    checkpoint.close()
    assert state is not None and state.consistent and state.commit_ts == events[-1].commit_ts
    assert list_files(tmp_path / "relay") == []
    # Started again (meta still unreachable): nothing to recover, the meta error as usual.
    again = run_drainer(write_config(tmp_path))
    assert again.returncode != 0 and "meta" in again.stderr
    assert downstream_rows(tmp_path) == expected_rows(60)


@pytest.mark.parametrize("relay", [False, True])
def test_unreachable_meta_without_anything_to_recover_fails_as_before(tmp_path: Path, relay: bool) -> None:
    result = run_drainer(write_config(tmp_path, relay=relay))
    assert result.returncode != 0
    assert "no meta leader answered" in result.stderr, result.stderr[-2000:]

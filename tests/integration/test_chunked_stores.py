"""Chunked transactions through the stores that keep binlogs, read back by the real readers.

- the file sink stores each chunked transaction's parts and final binlog;
  ``replay`` (the function, and ``binlog-bridge replay`` as a process) applies
  the same rows in the same order as the transaction applied whole;
- the relay log: a drainer killed after writing some parts of a transaction
  (the relay file cut there) recovers, as a real process with the meta service
  unreachable, to the transaction before it and never applies half of it; a
  relay holding the whole transaction recovers it whole; a RelaySink opened
  again after the cut writes the transaction whole and once.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from bridge.apps.diff import diff
from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.events import DDLEvent, Event, TxnEvent
from bridge.sink.schema import SchemaTracker
from drainer.checkpoint import CheckpointState
from drainer.checkpoint.file import FileCheckpoint
from drainer.relay.replay import replay
from drainer.relay.sink import RelaySink
from drainer.sinks.file.binlogfile import KIND_EVENT, KIND_PART, BinlogFileReader, iter_records, list_files
from drainer.sinks.file.sink import FileSink
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.integration.test_relay_recovery import CLUSTER, run_drainer, write_config
from tests.support.binlog_events import EventStream, table_schema
from tests.support.chunked_events import ChangeSpec, chunked_txn
from tests.support.drainer_cluster import (
    DrainerProcess,
    Producer,
    Written,
    delivered,
    expected_records,
    strip_ddl_details,
    table,
)
from tests.support.process import ChildProcess, wait_until
from tests.support.pump_server import PumpProcess, start_meta
from tests.support.recording_sink import RecordingSink, event_record, read_records

T = row_pb2.ColumnType
ROOT = Path(__file__).resolve().parents[2]
PAD = "p" * 120


def big_changes(first: int, count: int, extra: tuple[object, ...] = ()) -> list[ChangeSpec]:
    """Inserts, then updates and deletes of those rows: applied out of order they differ."""
    changes: list[ChangeSpec] = [
        ("insert", "shop.k", None, (i, f"new {i} {PAD}")) for i in range(first, first + count)
    ]
    changes += [
        ("insert", "shop.n", None, (i % 5, "keyless", *extra)) for i in range(first, first + count // 4)
    ]
    for i in range(first, first + count, 3):
        changes.append(("update", "shop.k", (i, f"new {i} {PAD}"), (i, f"moved {i}")))
    for i in range(first, first + count, 7):
        changes.append(
            ("delete", "shop.k", (i, f"moved {i}" if (i - first) % 3 == 0 else f"new {i} {PAD}"), None)
        )
    return changes


def workload(stream: EventStream, chunked: bool) -> list[Event]:
    """DDL, plain and (when ``chunked``) chunked transactions, an ALTER between them; with
    ``chunked`` False the same changes as transactions that came whole."""
    keyed = table_schema("shop", "k", [("id", T.BIGINT), ("v", T.VARCHAR)], key=["id"], table_id=1)
    keyless = table_schema("shop", "n", [("a", T.INT), ("b", T.TEXT)], table_id=2)
    events: list[Event] = [stream.create(keyed), stream.create(keyless)]
    extra: tuple[object, ...] = ()
    for round_ in range(4):
        changes = big_changes(round_ * 1000, 60, extra)
        events.append(chunked_txn(stream, changes, chunks=3 + round_) if chunked else stream.txn(changes))
        events.append(stream.inserts("shop.n", [(100 + round_, "plain", *extra)]))
        if round_ == 1:
            schema = stream.schema("shop", "n")
            schema.columns.add(id=3, name="extra", type=T.INT, nullable=True)
            schema.max_column_id = 3
            events.append(stream.alter(schema))
            extra = (round_,)
    return events


def apply_directly(events: list[Event], path: Path) -> None:
    """Apply to the SQLite sink as the drainer with data-dir ``path`` has it (``path``/sqlite)."""
    sink = SQLiteSink({}, path)
    sink.open(SinkContext())
    sink.write(events)
    sink.flush()
    sink.close()


def comparable(records: list[dict[str, object]]) -> list[dict[str, object]]:
    """What a sink saw, without timestamps and the recording sink's open lines."""
    return [
        {k: v for k, v in r.items() if k not in ("commit_ts", "start_ts")}
        for r in records
        if r["type"] != "open"
    ]


def test_file_sink_replay_applies_chunked_transactions_whole_and_in_order(tmp_path: Path) -> None:
    events = workload(EventStream(), chunked=True)
    assert sum(isinstance(e, TxnEvent) and e.parts is not None for e in events) == 4
    files = FileSink({"path": str(tmp_path / "files"), "max-file-size": 8192}, tmp_path)
    files.open(SinkContext())
    files.write(events[:5])
    files.write(events[3:])  # a retried batch: stored once
    assert files.flush() == events[-1].commit_ts
    files.close()
    assert len(list_files(tmp_path / "files")) >= 3
    stored = list(BinlogFileReader(tmp_path / "files").events())
    assert [s.commit_ts for s in stored] == [e.commit_ts for e in events]
    assert [0 if s.parts is None else s.parts.count for s in stored] == [
        0 if not isinstance(e, TxnEvent) or e.parts is None else len(list(e.parts())) for e in events
    ]
    # The same rows in the same order as the syncer handed the sink.
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    summary = replay(tmp_path / "files", RecordingSink({}, recorded))
    assert summary.txns == 8 and summary.ddls == 3 and summary.applied_ts == events[-1].commit_ts
    assert comparable(read_records(recorded)) == comparable([event_record(e) for e in events])
    # binlog-bridge replay into SQLite equals the same changes applied as whole transactions.
    apply_directly(workload(EventStream(), chunked=False), tmp_path / "whole")
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "replay", "--dir", str(tmp_path / "files"),
         "--to", f"sqlite://{tmp_path}/replayed"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "replayed 8 transactions" in done.stdout
    report = diff(f"sqlite://{tmp_path}/whole/sqlite", f"sqlite://{tmp_path}/replayed")
    assert report.equal and report.rows > 200, report.lines()


def relay_state(data_dir: Path, events: list[Event], applied: int, checkpoint_at: int) -> Path:
    """Relay ``events``; the downstream has ``events[:applied]``; checkpoint (not consistent) at
    ``checkpoint_at``. Returns the relay's last file."""
    scratch = data_dir / "scratch"
    scratch.mkdir(parents=True)
    relay = RelaySink(RecordingSink({}, scratch), data_dir / "relay", 8192)
    relay.open(SinkContext(cluster_id=CLUSTER))
    relay.write(events)
    relay.close()
    apply_directly(events[:applied], data_dir)
    checkpoint = FileCheckpoint(data_dir / "checkpoint.json", CLUSTER)
    tracker = SchemaTracker()  # the schema the drainer tracked at the checkpoint
    for event in events[: checkpoint_at + 1]:
        if isinstance(event, DDLEvent):
            tracker.apply(event.change)
    state = CheckpointState(events[checkpoint_at].commit_ts, tracker.snapshot(), consistent=False)
    checkpoint.save(state)
    checkpoint.close()
    return list_files(data_dir / "relay")[-1][1]


def cut_after_parts(path: Path, parts: int) -> None:
    """Cut the file after the ``parts``-th part record of its last transaction (a SIGKILL then)."""
    records = list(iter_records(path))
    assert records[-1].kind == KIND_EVENT and records[-2].kind == KIND_PART
    first = max(i for i, r in enumerate(records) if r.kind != KIND_PART and i < len(records) - 1) + 1
    with path.open("r+b") as f:
        f.truncate(records[first + parts - 1].end)


def rows(data_dir: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(data_dir / "sqlite" / "shop.db")
    try:
        return list(conn.execute("SELECT id, v FROM k ORDER BY id")) + sorted(
            conn.execute("SELECT a, b FROM n"), key=repr
        )
    finally:
        conn.close()


def expected(tmp_path: Path, events: list[Event], name: str) -> list[tuple[object, ...]]:
    apply_directly(events, tmp_path / name)
    return rows(tmp_path / name)


def checkpoint_state(data_dir: Path) -> CheckpointState:
    checkpoint = FileCheckpoint(data_dir / "checkpoint.json", CLUSTER)
    state = checkpoint.load()
    checkpoint.close()
    assert state is not None
    return state


def test_relay_recovery_never_applies_half_a_chunked_transaction(tmp_path: Path) -> None:
    events = workload(EventStream(), chunked=True)[:-1]  # ends with a chunked transaction
    last = events[-1]
    assert isinstance(last, TxnEvent) and last.parts is not None
    data_dir = tmp_path / "drainer"
    cut_after_parts(relay_state(data_dir, events, applied=5, checkpoint_at=3), parts=2)
    result = run_drainer(write_config(data_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "relay recovery of cluster" in result.stderr
    assert rows(data_dir) == expected(tmp_path, events[:-1], "before-last")
    state = checkpoint_state(data_dir)
    assert state.consistent and state.commit_ts == events[-2].commit_ts
    assert list_files(data_dir / "relay") == []


def test_relay_recovery_applies_a_whole_chunked_transaction(tmp_path: Path) -> None:
    events = workload(EventStream(), chunked=True)[:-1]
    data_dir = tmp_path / "drainer"
    relay_state(data_dir, events, applied=5, checkpoint_at=3)
    result = run_drainer(write_config(data_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert rows(data_dir) == expected(tmp_path, events, "all")
    assert checkpoint_state(data_dir).commit_ts == events[-1].commit_ts


def test_a_relay_reopened_after_a_cut_writes_the_transaction_again_whole(tmp_path: Path) -> None:
    events = workload(EventStream(), chunked=True)[:-1]
    relay_dir = tmp_path / "relay"
    inner_dir = tmp_path / "inner"
    inner_dir.mkdir()
    relay = RelaySink(RecordingSink({}, inner_dir), relay_dir, 8192)
    relay.open(SinkContext(cluster_id=CLUSTER))
    relay.write(events)
    relay.close()
    cut_after_parts(list_files(relay_dir)[-1][1], parts=1)
    again = RelaySink(RecordingSink({}, inner_dir), relay_dir, 8192)
    # the drainer's checkpoint is below: it delivers everything after it again
    again.open(SinkContext(resume_ts=events[4].commit_ts, cluster_id=CLUSTER))
    assert again.relayed_ts == events[-2].commit_ts
    again.write(events[5:])
    again.close()
    stored = list(BinlogFileReader(relay_dir).events())
    assert [s.commit_ts for s in stored] == [e.commit_ts for e in events]
    last = events[-1]
    assert isinstance(last, TxnEvent) and last.parts is not None
    assert stored[-1].parts is not None and list(stored[-1].parts.binlogs()) == list(last.parts())


# ---------------------------------------------------------------- real pumps and a real drainer

STORES_CONFIG = """\
[relay]
dir = "relay"
max-file-size = 65536

[skip]
on-error = "skip-and-log"
"""


def metric(drainer: DrainerProcess, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", drainer.metrics(), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def chunky(producer: Producer, name: str, first: int, count: int) -> Written:
    """A transaction of ``count`` inserts into ``name`` and updates of some of them: many parts."""
    changes: list[tuple[str, str, tuple[object, ...] | None, tuple[object, ...] | None]] = [
        ("insert", name, None, (first + i, f"row {i} of a large transaction, padded")) for i in range(count)
    ]
    changes += [
        ("update", name, (first + i, f"row {i} of a large transaction, padded"), (first + i, f"updated {i}"))
        for i in range(0, count, 50)
    ]
    return producer.txn(changes)


def replayed(directory: Path, where: Path) -> list[dict[str, object]]:
    where.mkdir()
    replay(directory, RecordingSink({}, where))
    return strip_ddl_details(delivered(read_records(where)))


def test_a_drainer_stores_chunked_transactions_whole_in_its_file_sink_relay_and_dead_letters(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    """Producer with a small chunk-bytes -> two pumps -> drainer (file + sqlite sinks, relay log,
    skip-and-log), SIGKILLed once while it gathers a chunked transaction. The file sink's
    directory replays to exactly what was written, once each; a chunked transaction the SQLite
    downstream refuses (its table dropped there) is in the dead-letter directory, all its parts.
    (The relay writes every part before the sinks; its files are removed once applied.)"""
    child, meta_addr = start_meta(tmp_path)
    children.append(child)
    pumps = [PumpProcess(tmp_path, meta_addr, node_id=f"pump-{i}") for i in range(2)]
    for pump in pumps:
        pump.start()
    producer = Producer(meta_addr, chunk_bytes=16384)
    drainer = DrainerProcess(tmp_path, meta_addr, sink_type='["file", "sqlite"]', extra_config=STORES_CONFIG)
    try:
        drainer.start()
        for table_id, name in enumerate(("big", "small", "victim"), start=40):
            producer.create(table(name, table_id))
        for i in range(30):
            producer.txn([("insert", "small", None, (i, f"s{i}"))])
        chunky(producer, "big", 0, 8000)
        producer.txn([("insert", "small", None, (100, "after the first"))])
        drainer.wait_checkpoint(producer.written[-1].commit_ts, timeout=300)
        drainer.kill()
        downstream = sqlite3.connect(drainer.data_dir / "sqlite" / "shop.db")
        downstream.execute("DROP TABLE victim")  # the downstream refuses the next one's rows
        downstream.commit()
        downstream.close()
        refused = chunky(producer, "victim", 0, 3000)
        chunky(producer, "big", 100_000, 8000)
        drainer.start()
        wait_until(  # SIGKILLed once it has begun gathering parts (pulling, relaying, applying)
            lambda: metric(drainer, "bridge_drainer_spilled_bytes_total") > 0,
            timeout=120,
            what="the drainer to spill a chunked transaction's parts",
        )
        drainer.kill()
        drainer.start()
        producer.txn([("insert", "small", None, (101, "the last"))])
        drainer.wait_checkpoint(producer.written[-1].commit_ts, timeout=300)
        drainer.stop()
    finally:
        drainer.kill()
        producer.close()
        for pump in pumps:
            pump.kill()
    expected = strip_ddl_details(expected_records(producer.written))
    assert replayed(drainer.data_dir / "binlog-files", tmp_path / "from-files") == expected
    stored = list(BinlogFileReader(drainer.data_dir / "binlog-files").events())
    assert [s.commit_ts for s in stored] == [e["commit_ts"] for e in expected]  # each once
    assert sum(s.parts is not None for s in stored) == 3
    dead = [r for r in expected if r["commit_ts"] == refused.commit_ts]
    assert replayed(drainer.data_dir / "dead-letter", tmp_path / "from-dead-letter") == dead

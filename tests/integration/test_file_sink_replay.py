"""The file sink and ``binlog-bridge replay``: round trip with rotation, torn tail, ranges, time bounds."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from bridge.apps.diff import diff
from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.events import Event, ResolvedEvent
from bridge.tso import compose, physical_ms
from drainer.relay.replay import replay
from drainer.sinks.file.binlogfile import RECORD_HEAD, list_files
from drainer.sinks.file.sink import FileSink
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.support.binlog_events import EventStream, RowChange, table_schema

T = row_pb2.ColumnType
ROOT = Path(__file__).resolve().parents[2]


def workload(stream: EventStream, transactions: int = 120) -> list[Event]:
    """DDL and DML on a keyed and a keyless table, with an ALTER halfway."""
    keyed = table_schema("shop", "k", [("id", T.BIGINT), ("v", T.VARCHAR)], key=["id"], table_id=1)
    keyless = table_schema("shop", "n", [("a", T.INT), ("b", T.TEXT)], table_id=2)
    events: list[Event] = [stream.create(keyed), stream.create(keyless)]
    extra: tuple[object, ...] = ()
    for i in range(transactions):
        changes: list[RowChange] = [
            ("insert", "shop.k", None, (i, f"v{i}", *extra)),
            ("insert", "shop.n", None, (i % 7, "x")),
        ]
        if i % 3 == 0 and i:
            changes.append(("update", "shop.k", (i - 1, f"v{i - 1}", *extra), (i - 1, f"u{i - 1}", *extra)))
        if i % 5 == 0:
            changes.append(("delete", "shop.n", (i % 7, "x"), None))
        events.append(stream.txn(changes))
        if i == transactions // 2:
            keyed = stream.schema("shop", "k")
            keyed.columns.add(id=3, name="extra", type=T.INT, nullable=True)
            keyed.max_column_id = 3
            events.append(stream.alter(keyed))
            extra = (None,)
    return events


def realistic_stream() -> EventStream:
    return EventStream(start=compose(int(time.time() * 1000) - 3_600_000, 0))


def file_sink(path: Path, **config: object) -> FileSink:
    sink = FileSink({"path": str(path), "max-file-size": 4096, **config}, path)
    sink.open(SinkContext())
    return sink


def apply_directly(events: list[Event], path: Path) -> None:
    sink = SQLiteSink({"path": str(path)}, path)
    sink.open(SinkContext())
    sink.write(events)
    sink.flush()
    sink.close()


def test_round_trip_through_rotated_files_equals_direct_apply(tmp_path: Path) -> None:
    events = workload(EventStream())
    files = file_sink(tmp_path / "files")
    files.write([*events, ResolvedEvent(events[-1].commit_ts + 100)])
    assert files.flush() == events[-1].commit_ts + 100
    files.close()
    assert len(list_files(tmp_path / "files")) >= 3
    apply_directly(events, tmp_path / "direct")
    summary = replay(tmp_path / "files", SQLiteSink({"path": str(tmp_path / "replayed")}, tmp_path))
    assert summary.txns == 120 and summary.ddls == 3 and summary.applied_ts == events[-1].commit_ts
    report = diff(f"sqlite://{tmp_path}/direct/shop.db", f"sqlite://{tmp_path}/replayed/shop.db")
    assert report.equal and report.rows > 100, report.lines()


def test_torn_tail_is_cut_and_resent_events_are_stored_once(tmp_path: Path) -> None:
    events = workload(EventStream(), 40)
    files = file_sink(tmp_path / "files", **{"max-file-size": 1 << 20})
    files.write(events[:30])
    files.flush()
    files.close()
    (_, last), *_ = list_files(tmp_path / "files")[::-1]
    with last.open("ab") as f:  # a record the crash cut short
        f.write(RECORD_HEAD.pack(0x42424631, 1000, 0) + b"torn")
    again = FileSink({"path": str(tmp_path / "files")}, tmp_path)
    again.open(
        SinkContext(resume_ts=events[10].commit_ts)
    )  # the drainer's checkpoint is older than the files
    again.write(events)  # everything from its checkpoint on, again
    assert again.flush() == events[-1].commit_ts
    again.close()
    summary = replay(tmp_path / "files", SQLiteSink({"path": str(tmp_path / "replayed")}, tmp_path))
    assert summary.txns + summary.ddls == len(events)
    apply_directly(events, tmp_path / "direct")
    assert diff(f"sqlite://{tmp_path}/direct", f"sqlite://{tmp_path}/replayed").equal


def test_replay_in_two_ranges_equals_one(tmp_path: Path) -> None:
    events = workload(EventStream())
    files = file_sink(tmp_path / "files")
    files.write(events)
    files.flush()
    files.close()
    middle = events[70].commit_ts
    target = tmp_path / "replayed"
    first = replay(tmp_path / "files", SQLiteSink({"path": str(target)}, tmp_path), stop_ts=middle)
    assert first.last_ts == middle
    second = replay(tmp_path / "files", SQLiteSink({"path": str(target)}, tmp_path), start_ts=middle + 1)
    assert second.first_ts == events[71].commit_ts
    again = replay(tmp_path / "files", SQLiteSink({"path": str(target)}, tmp_path))  # applied already: no-op
    assert again.applied_ts == events[-1].commit_ts
    apply_directly(events, tmp_path / "direct")
    assert diff(f"sqlite://{tmp_path}/direct", f"sqlite://{target}").equal


def test_replay_command_with_time_bounds(tmp_path: Path) -> None:
    stream = realistic_stream()
    events: list[Event] = []
    for batch in range(3):
        stream.ts = compose(physical_ms(stream.ts) + 1000, 0)  # one second between batches
        late = [stream.inserts("shop.k", [(100 + batch, "t", None)])] if batch else []
        events += late or workload(stream, 10)
    files = file_sink(tmp_path / "files")
    files.write(events)
    files.flush()
    files.close()
    stop = datetime.fromtimestamp(physical_ms(events[-2].commit_ts) / 1000).isoformat(timespec="milliseconds")
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "replay", "--dir", str(tmp_path / "files"),
         "--to", f"sqlite://{tmp_path}/replayed", "--stop-time", stop],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "replayed 11 transactions" in done.stdout
    apply_directly(events[:-1], tmp_path / "direct")
    assert diff(f"sqlite://{tmp_path}/direct", f"sqlite://{tmp_path}/replayed").equal
    bad = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "replay", "--dir", str(tmp_path / "files"),
         "--to", f"sqlite://{tmp_path}/replayed", "--start-ts", "5", "--stop-ts", "4"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "range is empty" in bad.stderr


def test_a_sink_started_after_tables_exist_takes_the_drainers_snapshot(tmp_path: Path) -> None:
    stream = EventStream()
    before = workload(stream, 5)  # the drainer saw these before the file sink existed
    later = [stream.inserts("shop.k", [(50, "late", None)])]
    sink = FileSink({"path": str(tmp_path / "files")}, tmp_path)
    sink.open(SinkContext.at(before[-1].commit_ts, stream.tracker.snapshot()))
    sink.write(later)
    sink.flush()
    sink.close()
    apply_directly(before, tmp_path / "replayed")
    summary = replay(tmp_path / "files", SQLiteSink({"path": str(tmp_path / "replayed")}, tmp_path))
    assert summary.txns == 1 and summary.rows == 1

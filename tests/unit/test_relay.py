"""The relay log: append before the sink, rotation, GC after flush, torn tails, cluster checks,
and recovery applying exactly the events above a not-consistent checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.events import DDLEvent, Event, ResolvedEvent
from bridge.sink.schema import SchemaTracker
from drainer.checkpoint import CheckpointState
from drainer.checkpoint.file import FileCheckpoint
from drainer.config import config_from_dict
from drainer.relay.recovery import recover
from drainer.relay.sink import META_NAME, RelayError, RelaySink, read_cluster_id
from drainer.sinks.file.binlogfile import RECORD_HEAD, BinlogFileReader, iter_records, list_files
from tests.support.binlog_events import EventStream, table_schema
from tests.support.recording_sink import SINK_TYPE, RecordingSink, read_records

T = row_pb2.ColumnType


def make_events(count: int, stream: EventStream | None = None) -> list[Event]:
    """A CREATE TABLE and ``count`` one-row inserts (about 250 bytes each)."""
    stream = stream or EventStream()
    events: list[Event] = [
        stream.create(table_schema("shop", "t", [("id", T.BIGINT), ("v", T.TEXT)], ["id"]))
    ]
    events += [stream.inserts("shop.t", [(i, "x" * 200)]) for i in range(count)]
    return events


def relay_ts(directory: Path) -> list[int]:
    return [e.commit_ts for e in BinlogFileReader(directory).events()]


def open_relay(tmp_path: Path, resume_ts: int = 0, max_size: int = 4096, cluster: int = 7) -> RelaySink:
    relay = RelaySink(RecordingSink({}, tmp_path), tmp_path / "relay", max_size)
    relay.open(SinkContext(resume_ts=resume_ts, cluster_id=cluster))
    return relay


def delivered(tmp_path: Path) -> list[int]:
    return [r["commit_ts"] for r in read_records(tmp_path) if r["type"] in ("txn", "ddl")]


def test_events_are_relayed_before_the_sink_and_files_rotate(tmp_path: Path) -> None:
    events = make_events(60)
    relay = open_relay(tmp_path)
    relay.write(events[:30])
    relay.write(events[30:])
    # Relayed (and fsynced) by write itself, before any flush of the sink.
    assert relay_ts(tmp_path / "relay") == [e.commit_ts for e in events]
    status = relay.status()
    assert status["files"] == len(list_files(tmp_path / "relay")) > 3
    assert status["relayed_ts"] == events[-1].commit_ts
    assert read_cluster_id(tmp_path / "relay") == 7
    relay.close()
    assert delivered(tmp_path) == [e.commit_ts for e in events]


def test_flush_removes_applied_files_but_never_the_one_being_written(tmp_path: Path) -> None:
    events = make_events(60)
    relay = open_relay(tmp_path)
    relay.write(events[:40])
    files_before = list_files(tmp_path / "relay")
    position = relay.flush()
    assert position == events[39].commit_ts
    remaining = list_files(tmp_path / "relay")
    assert len(remaining) == 1 and remaining[0] == files_before[-1]
    relay.write([*events[40:], ResolvedEvent(events[-1].commit_ts + 5)])
    relay.flush()
    remaining = list_files(tmp_path / "relay")
    assert len(remaining) == 1  # everything applied: only the current file stays
    # What remains still decodes alone: its header carries the table's schema.
    header = next(iter_records(remaining[0][1]))
    assert header.kind == 1 and b"shop" in header.data
    assert (
        relay.removed_files >= len(files_before) - 1
        and relay.status()["removed_files"] == relay.removed_files
    )
    relay.close()


def test_gc_keeps_files_holding_unapplied_events(tmp_path: Path) -> None:
    events = make_events(60)
    relay = RelaySink(RecordingSink({}, tmp_path), tmp_path / "relay", 4096)
    relay.open(SinkContext(cluster_id=7))
    relay.write(events)
    relay._collect(events[20].commit_ts)  # the sink applied only up to event 20
    left = relay_ts(tmp_path / "relay")
    assert left[0] <= events[21].commit_ts  # event 21 onwards is still relayed
    assert left[-1] == events[-1].commit_ts
    assert left[0] > events[0].commit_ts  # earlier whole files went
    relay.close()


class FailingOpenSink(RecordingSink):
    """Its first open fails the way a MySQL sink's does while the downstream is down."""

    opens = 0

    def open(self, context: SinkContext) -> None:
        type(self).opens += 1
        if type(self).opens == 1:
            from bridge.sink.errors import SinkUnavailable

            raise SinkUnavailable("downstream unavailable")
        super().open(context)


def test_open_is_retried_with_the_inner_sinks(tmp_path: Path) -> None:
    from bridge.sink.errors import SinkUnavailable

    events = make_events(4)
    relay = RelaySink(FailingOpenSink({}, tmp_path), tmp_path / "relay", 1 << 20)
    with pytest.raises(SinkUnavailable):
        relay.open(SinkContext(cluster_id=7))
    relay.open(SinkContext(cluster_id=7))  # the sink driver's retry
    relay.write(events)
    relay.close()
    assert relay_ts(tmp_path / "relay") == [e.commit_ts for e in events]
    assert delivered(tmp_path) == [e.commit_ts for e in events]


def test_retried_writes_are_relayed_once(tmp_path: Path) -> None:
    events = make_events(5)
    relay = open_relay(tmp_path, max_size=1 << 20)
    relay.write(events)
    relay.write(events)  # the sink driver writes the same events again after a retriable error
    assert relay_ts(tmp_path / "relay") == [e.commit_ts for e in events]
    relay.close()
    assert delivered(tmp_path) == [e.commit_ts for e in events] * 2


def test_torn_tail_is_truncated_and_redelivered_events_not_appended_twice(tmp_path: Path) -> None:
    stream = EventStream()
    events = make_events(10, stream)
    relay = open_relay(tmp_path, max_size=1 << 20)
    relay.write(events)
    relay.close()
    ((_, path),) = list_files(tmp_path / "relay")
    with path.open("ab") as f:  # a crash in the middle of an append
        f.write(RECORD_HEAD.pack(0x42424631, 900, 0) + b"partial")
    # Restart from a checkpoint at event 4: the pumps re-deliver 5..10, then new events come.
    relay = open_relay(tmp_path, resume_ts=events[4].commit_ts, max_size=1 << 20)
    more: list[Event] = [stream.inserts("shop.t", [(100 + i, "y")]) for i in range(3)]
    relay.write(events[5:] + more)
    assert relay_ts(tmp_path / "relay") == [e.commit_ts for e in events + more]
    relay.close()


def test_a_relay_ending_below_the_checkpoint_is_reset(tmp_path: Path) -> None:
    stream = EventStream()
    events = make_events(10, stream)
    relay = open_relay(tmp_path, max_size=1 << 20)
    relay.write(events[:3])
    relay.close()
    # The drainer's checkpoint is far ahead (the relay was off meanwhile): the old files go.
    resume = events[-1].commit_ts
    relay = RelaySink(RecordingSink({}, tmp_path), tmp_path / "relay", 1 << 20)
    relay.open(SinkContext.at(resume, stream.tracker.snapshot(), cluster_id=7))
    assert list_files(tmp_path / "relay") == []
    event = stream.inserts("shop.t", [(500, "z")])
    relay.write([event])
    relay.close()
    ((_, path),) = list_files(tmp_path / "relay")
    header = next(iter_records(path))
    assert header.commit_ts == resume and b"shop" in header.data  # decodes alone, from the checkpoint
    assert relay_ts(tmp_path / "relay") == [event.commit_ts]


def test_a_relay_holding_a_now_ignored_transaction_is_reset(tmp_path: Path) -> None:
    stream = EventStream()
    events = make_events(6, stream)
    relay = open_relay(tmp_path, max_size=1 << 20)
    relay.write(events)  # the sink then refuses events[4] for good: the drainer stops
    relay.close()
    skipped = events[4].commit_ts
    relay = RelaySink(RecordingSink({}, tmp_path), tmp_path / "relay", 1 << 20, frozenset({skipped}))
    relay.open(SinkContext.at(events[2].commit_ts, stream.tracker.snapshot(), cluster_id=7))
    assert list_files(tmp_path / "relay") == []  # a recovery could otherwise apply the skipped one
    redelivered = [e for e in events[3:] if e.commit_ts != skipped]
    relay.write(redelivered)
    relay.close()
    assert relay_ts(tmp_path / "relay") == [e.commit_ts for e in redelivered]
    # Listed but at or below the checkpoint: no reason to reset.
    relay = RelaySink(
        RecordingSink({}, tmp_path), tmp_path / "relay", 1 << 20, frozenset({events[1].commit_ts})
    )
    relay.open(SinkContext(resume_ts=events[2].commit_ts, cluster_id=7))
    assert relay_ts(tmp_path / "relay") == [e.commit_ts for e in redelivered]
    relay.close()


def test_another_clusters_relay_is_refused(tmp_path: Path) -> None:
    relay = open_relay(tmp_path, cluster=1)
    relay.write(make_events(2))
    relay.close()
    other = RelaySink(RecordingSink({}, tmp_path), tmp_path / "relay", 4096)
    with pytest.raises(RelayError, match=r"relay\.dir: .* cluster 1, this is cluster 2"):
        other.open(SinkContext(cluster_id=2))


# ---------------------------------------------------------------------- recovery


def drainer_config(tmp_path: Path) -> dict[str, object]:
    return {
        "data-dir": str(tmp_path),
        "relay": {"dir": "relay", "max-file-size": 4096},
        "sink": {"type": SINK_TYPE},
    }


def schema_at(events: list[Event], position: int) -> bytes:
    """The drainer's schema snapshot after ``events[: position + 1]``."""
    tracker = SchemaTracker()
    for event in events[: position + 1]:
        if isinstance(event, DDLEvent):
            tracker.apply(event.change)
    return tracker.snapshot()


def crashed_drainer(
    tmp_path: Path, events: list[Event], applied: int, checkpoint_at: int, schema: bytes | None = None
) -> None:
    """What a drainer SIGKILLed mid-batch leaves: every event relayed, ``applied`` of them in the
    sink, a checkpoint (not consistent) at event ``checkpoint_at``."""
    (tmp_path / "before").mkdir()
    relay = RelaySink(RecordingSink({}, tmp_path / "before"), tmp_path / "relay", 4096)
    relay.open(SinkContext(cluster_id=7))
    relay.write(events[:applied])
    relay.flush()
    relay.write(events[applied:])  # relayed; the crash comes before the sink applies them
    relay.close()
    checkpoint = FileCheckpoint(tmp_path / "checkpoint.json", 7)
    if schema is None:
        schema = schema_at(events, checkpoint_at)
    checkpoint.save(CheckpointState(events[checkpoint_at].commit_ts, schema, consistent=False))
    checkpoint.close()


def test_recovery_keeps_tables_only_the_checkpoint_knows(tmp_path: Path) -> None:
    stream = EventStream()
    events = make_events(5, stream)
    # A table the filter leaves out: its CREATE reached the drainer's schema, never a sink.
    hidden = EventStream(start=events[-1].commit_ts)
    created = hidden.create(table_schema("other", "hidden", [("id", T.BIGINT)], ["id"], table_id=5))
    checkpoint_schema = SchemaTracker.restore(schema_at(events, 2))
    checkpoint_schema.apply(created.change)
    stream.ts = created.commit_ts
    events.append(stream.create(table_schema("shop", "later", [("id", T.BIGINT)], ["id"], table_id=9)))
    crashed_drainer(tmp_path, events, applied=4, checkpoint_at=2, schema=checkpoint_schema.snapshot())
    assert recover(config_from_dict(drainer_config(tmp_path))) is not None
    checkpoint = FileCheckpoint(tmp_path / "checkpoint.json", 7)
    state = checkpoint.load()
    checkpoint.close()
    assert state is not None and state.consistent
    tracker = SchemaTracker.restore(state.schema)
    assert tracker.find("other", "hidden") is not None  # from the checkpoint
    assert tracker.find("shop", "later") is not None  # a relayed DDL above it
    assert tracker.find("shop", "t") is not None


def test_recovery_applies_the_events_above_the_checkpoint_and_sets_consistent(tmp_path: Path) -> None:
    events = make_events(50)
    crashed_drainer(tmp_path, events, applied=30, checkpoint_at=20)
    recovery = recover(config_from_dict(drainer_config(tmp_path)))
    assert recovery is not None
    assert (recovery.cluster_id, recovery.checkpoint_ts) == (7, events[20].commit_ts)
    assert recovery.consistent_ts == events[-1].commit_ts
    assert delivered(tmp_path) == [e.commit_ts for e in events[21:]]
    assert recovery.summary.txns == len(events) - 21
    assert "consistent" in recovery.line()
    checkpoint = FileCheckpoint(tmp_path / "checkpoint.json", 7)
    state = checkpoint.load()
    checkpoint.close()
    assert state is not None and state.consistent and state.commit_ts == events[-1].commit_ts
    assert b"shop" in state.schema  # the schema valid at the last relayed event
    assert list_files(tmp_path / "relay") == [] and (tmp_path / "relay" / META_NAME).exists()
    # A second start finds a consistent checkpoint: nothing more to do.
    assert recover(config_from_dict(drainer_config(tmp_path))) is None


def test_recovery_rows_are_decoded_with_the_relayed_schema(tmp_path: Path) -> None:
    events = make_events(12)
    crashed_drainer(tmp_path, events, applied=3, checkpoint_at=1)
    assert recover(config_from_dict(drainer_config(tmp_path))) is not None
    records = [r for r in read_records(tmp_path) if r["type"] == "txn"]
    assert records[0]["changes"][0]["after"] == [1, "x" * 200]
    assert [r["changes"][0]["after"][0] for r in records] == list(range(1, 12))


class SafeModeRecordingSink(RecordingSink):
    """A recording sink that notes the safe-mode flag of the context it is opened with in its log."""

    name = "safe-recording"

    def open(self, context: SinkContext) -> None:
        super().open(context)
        self._file.write(json.dumps({"type": "safe-mode", "on": context.safe_mode}) + "\n")


def test_recovery_forces_safe_mode_in_every_sink_of_a_fan_out(tmp_path: Path) -> None:
    events = make_events(8)
    crashed_drainer(tmp_path, events, applied=5, checkpoint_at=3)
    table = drainer_config(tmp_path)
    table["sink"] = {"type": [f"{__name__}:SafeModeRecordingSink", "file"]}
    recovery = recover(config_from_dict(table))
    assert recovery is not None and recovery.consistent_ts == events[-1].commit_ts
    records = read_records(tmp_path)
    assert {"type": "safe-mode", "on": True} in records
    assert delivered(tmp_path) == [e.commit_ts for e in events[4:]]
    # The file sink of the fan-out got the same events.
    assert relay_ts(tmp_path / "binlog-files") == [e.commit_ts for e in events[4:]]


def test_recovery_stops_at_a_torn_tail(tmp_path: Path) -> None:
    events = make_events(10)
    crashed_drainer(tmp_path, events, applied=6, checkpoint_at=4)
    last = list_files(tmp_path / "relay")[-1][1]
    with last.open("ab") as f:  # the crash came in the middle of appending one more event
        f.write(RECORD_HEAD.pack(0x42424631, 4000, 0) + b"half an event")
    recovery = recover(config_from_dict(drainer_config(tmp_path)))
    assert recovery is not None and recovery.consistent_ts == events[-1].commit_ts
    assert delivered(tmp_path) == [e.commit_ts for e in events[5:]]


def test_recovery_with_nothing_relayed_above_the_checkpoint(tmp_path: Path) -> None:
    events = make_events(6)
    crashed_drainer(tmp_path, events, applied=len(events), checkpoint_at=len(events) - 1)
    checkpoint = FileCheckpoint(tmp_path / "checkpoint.json", 7)
    above = events[-1].commit_ts + 100  # a resolved ts: nothing was relayed after the last event
    checkpoint.save(CheckpointState(above, b"schema at the checkpoint", consistent=False))
    checkpoint.close()
    recovery = recover(config_from_dict(drainer_config(tmp_path)))
    assert recovery is not None and recovery.consistent_ts == above and recovery.summary.txns == 0
    assert delivered(tmp_path) == []
    checkpoint = FileCheckpoint(tmp_path / "checkpoint.json", 7)
    assert checkpoint.load() == CheckpointState(above, b"schema at the checkpoint", True)
    checkpoint.close()


def test_nothing_to_recover(tmp_path: Path) -> None:
    config = config_from_dict(drainer_config(tmp_path))
    assert recover(config) is None  # no relay at all
    events = make_events(3)
    relay = open_relay(tmp_path)
    relay.write(events)
    relay.close()
    assert recover(config) is None  # a relay, but no checkpoint of its cluster
    checkpoint = FileCheckpoint(tmp_path / "checkpoint.json", 7)
    checkpoint.save(CheckpointState(events[0].commit_ts, b"", consistent=True))
    checkpoint.close()
    assert recover(config) is None  # a clean stop left the downstream consistent
    assert len(relay_ts(tmp_path / "relay")) == 4  # and the relay was left alone
    no_relay = config_from_dict({"data-dir": str(tmp_path), "sink": {"type": SINK_TYPE}})
    assert recover(no_relay) is None


def test_relay_config_is_checked() -> None:
    from bridge.errors import ConfigError

    with pytest.raises(ConfigError, match=r"relay\.max-file-size"):
        config_from_dict({"relay": {"dir": "r", "max-file-size": 10}})
    with pytest.raises(ConfigError, match=r"relay\.dri"):
        config_from_dict({"relay": {"dri": "r"}})
    config = config_from_dict({"data-dir": "/data", "relay": {"dir": "relay"}})
    assert config.relay.enabled and config.relay.directory(Path("/data")) == Path("/data/relay")
    assert config.relay.max_file_size == 10 << 20
    assert not config_from_dict({}).relay.enabled


def test_a_relay_file_whose_first_record_is_unreadable_stops_the_clean_up_without_failing_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole first record of a newer version's kind (or not a header) is a ProtocolError now,
    not a torn tail: the clean-up after a flush keeps that file rather than raising."""
    from drainer.relay.sink import _header_ts
    from drainer.sinks.file.binlogfile import encode_record, event_payload, header_payload

    newer = tmp_path / "binlog-0000000002.bbf"
    newer.write_bytes(encode_record(bytes((9,)) + (7).to_bytes(8, "big") + b"payload"))
    headless = tmp_path / "binlog-0000000003.bbf"
    headless.write_bytes(encode_record(event_payload(8, b"binlog")))
    good = tmp_path / "binlog-0000000004.bbf"
    good.write_bytes(encode_record(header_payload(41, b"")))
    with caplog.at_level("WARNING", logger="drainer.relay.sink"):
        assert _header_ts(newer) is None
        assert _header_ts(headless) is None
    assert _header_ts(good) == 41
    assert "binlog-0000000002.bbf: first record unreadable" in caplog.text
    assert "binlog-0000000003.bbf: first record unreadable" in caplog.text

"""A TEST DOUBLE of the ``Sink`` contract (:mod:`bridge.sink.contract`): records every event it is given.

Not a downstream: it appends one JSON line per event to ``<data-dir>/events.jsonl``
(``{"type": "txn"|"ddl"|"resolved", "commit_ts", "start_ts", "changes": [...]}``, and
``{"type": "open", "commit_ts": resume_ts}`` each time the sink is opened;
rows decoded through ``changes()``), fsyncs on ``flush`` and returns the
last commit_ts written, so a test can read exactly what a drainer process
delivered and in which order, even after SIGKILL. Used as
``[sink] type = "tests.support.recording_sink:RecordingSink"``.

``[sink."tests.support.recording_sink:RecordingSink"]`` keys: ``fail-writes``
(raise a retriable error from the first N writes) and ``fail-at-commit-ts``
(raise a non-retriable error when an event with that commit_ts is written), ``summarize``
(record row counts by kind instead of the rows, for huge transactions), ``hang-at-commit-ts``
(decode half the rows of the transaction with that commit_ts, create ``<data-dir>/hanging``,
then block forever: a test SIGKILLs the drainer in the middle of applying it).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.errors import BridgeError
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.events import DDLEvent, Event, ResolvedEvent, TxnEvent

SINK_TYPE = "tests.support.recording_sink:RecordingSink"


class FlakyDownstream(BridgeError):
    retriable = True


class BrokenDownstream(BridgeError):
    pass


def _value(value: object) -> object:
    return value if isinstance(value, int | str | float | type(None)) else repr(value)


def event_record(event: Event, summarize: bool = False) -> dict[str, Any]:
    if isinstance(event, ResolvedEvent):
        return {"type": "resolved", "commit_ts": event.commit_ts}
    record: dict[str, Any] = {"commit_ts": event.commit_ts, "start_ts": event.start_ts}
    if isinstance(event, DDLEvent):
        record.update(type="ddl", query=event.query, table=f"{event.change.db}.{event.change.table}")
        return record
    assert isinstance(event, TxnEvent)
    record["type"] = "txn"
    if summarize:  # a huge transaction: count its rows as they stream past, keep none
        kinds: dict[str, int] = {}
        for change in event.changes():
            kinds[change.kind] = kinds.get(change.kind, 0) + 1
        record["rows"] = kinds
        return record
    record["changes"] = [
        {
            "kind": c.kind,
            "table": f"{c.table.db}.{c.table.table}",
            "before": None if c.before is None else [_value(v) for v in c.before],
            "after": None if c.after is None else [_value(v) for v in c.after],
        }
        for c in event.changes()
    ]
    return record


class RecordingSink(Sink):
    name = "recording"

    def __init__(self, config_table: Mapping[str, Any], data_dir: Path) -> None:
        self.path = Path(data_dir) / "events.jsonl"
        self._fail_writes = int(config_table.get("fail-writes", 0))
        self._fail_at = int(config_table.get("fail-at-commit-ts", 0))
        self._summarize = bool(config_table.get("summarize", False))
        self._hang_at = int(config_table.get("hang-at-commit-ts", 0))
        self._data_dir = Path(data_dir)
        self._file: Any = None
        self._written = 0

    def open(self, context: SinkContext) -> None:
        super().open(context)
        resume_ts = context.resume_ts
        if self.path.exists():  # drop a torn last line a SIGKILL left: it was never flushed
            data = self.path.read_bytes()
            with self.path.open("r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
        self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps({"type": "open", "commit_ts": resume_ts}) + "\n")
        self._written = resume_ts

    def write(self, events: Sequence[Event]) -> None:
        if self._fail_writes > 0:
            self._fail_writes -= 1
            raise FlakyDownstream("recording sink: the downstream is briefly unavailable")
        for event in events:
            if event.commit_ts == self._fail_at:
                raise BrokenDownstream(f"recording sink: refusing commit_ts {event.commit_ts}")
            if event.commit_ts == self._hang_at and isinstance(event, TxnEvent):
                self._hang(event)
            self._file.write(json.dumps(event_record(event, self._summarize), sort_keys=True) + "\n")
            self._written = max(self._written, event.commit_ts)

    def _hang(self, event: TxnEvent) -> None:
        changes = event.changes()
        for _ in range(event.row_count // 2):
            next(changes)
        (self._data_dir / "hanging").write_text(str(event.commit_ts))
        threading.Event().wait()  # until the test kills the process

    def flush(self) -> int:
        self._file.flush()
        os.fsync(self._file.fileno())
        return self._written

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def read_records(data_dir: Path) -> list[dict[str, Any]]:
    path = Path(data_dir) / "events.jsonl"
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    complete = text[: text.rfind("\n") + 1]  # a torn last line after SIGKILL was never flushed
    return [json.loads(line) for line in complete.splitlines()]

"""The capture's durable state: position, table schemas with their ids, snapshot progress.

Two files in ``data-dir``:

- ``capture-state.json`` — a full copy of the state as of record ``seq``
  (replaced atomically: :func:`bridge.durable.write_atomically`);
- ``capture-journal.log`` — one JSON record a line, appended after it.

A transaction is journaled twice (:class:`Journal`):

1. ``begin`` (its start_ts) before its Prewrite is written;
2. ``commit`` (start_ts, commit_ts, the position after it, the schemas its
   DDL changed) once the Prewrite is acknowledged and before the Commit is
   sent.

So after a crash exactly one of these holds for the last transaction, and
:meth:`Journal.pending` says what to finish: a ``begin`` without ``commit``
— the Prewrite may sit on a pump unpaired, send its Rollback and capture the
transaction again from the previous position; a ``commit`` — the upstream
transaction is in the pumps as far as the capture can tell, send its Commit
again (a pump drops a duplicate) and go on after it. The position therefore
moves only once a pump acknowledged the transaction's Prewrite, and a
transaction is never delivered twice.

Records carry increasing ``seq`` numbers; a record at or below the state
file's ``seq`` is already in it (a crash between rewriting the state file and
truncating the journal). A torn last line (a crash mid-append) is ignored:
its record was never acted on.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.apps.capture.position import Position
from bridge.durable import fsync_dir, write_atomically
from bridge.errors import StoreError
from bridge.proto import row_pb2

log = logging.getLogger(__name__)

STATE_FILE = "capture-state.json"
JOURNAL_FILE = "capture-journal.log"
COMPACT_EVERY = 20_000  # records between state-file rewrites


@dataclass
class Pending:
    """The last transaction's unfinished second phase."""

    start_ts: int
    commit_ts: int = 0  # 0: only the begin record exists


@dataclass
class CaptureState:
    position: Position | None = None
    tables: dict[str, row_pb2.TableSchema] = field(default_factory=dict)  # "db.table" -> schema with ids
    snapshot: str = "none"  # none | running | done
    pending: Pending | None = None
    # A DDL's shadow tables as they were before it ran on the shadow ({"db": ..., "tables":
    # {table: SHOW CREATE TABLE text or None}}), until the DDL's binlog is journaled: a restart
    # in between puts them back, so the DDL, read again, runs on the shadow once.
    shadow_undo: dict[str, Any] | None = None
    seq: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "position": self.position.to_json() if self.position else None,
            "tables": {name: _schema_text(schema) for name, schema in self.tables.items()},
            "snapshot": self.snapshot,
            "pending": None if self.pending is None else [self.pending.start_ts, self.pending.commit_ts],
            "shadow_undo": self.shadow_undo,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaptureState:
        pending = data.get("pending")
        return cls(
            position=Position.from_json(data["position"]) if data.get("position") else None,
            tables={name: _schema(text) for name, text in data.get("tables", {}).items()},
            snapshot=str(data.get("snapshot", "none")),
            pending=None if not pending else Pending(int(pending[0]), int(pending[1])),
            shadow_undo=data.get("shadow_undo"),
            seq=int(data.get("seq", 0)),
        )


def _schema_text(schema: row_pb2.TableSchema) -> str:
    return base64.b64encode(schema.SerializeToString()).decode()


def _schema(text: str) -> row_pb2.TableSchema:
    return row_pb2.TableSchema.FromString(base64.b64decode(text))


class Journal:
    """Reads the state at start, appends records, rewrites the state file now and then."""

    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self._dir = Path(directory)
        self._fsync = fsync
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"capture.data-dir: cannot create {self._dir}: {exc.strerror}") from exc
        self.state = self._load()
        self._records = 0
        self._file = self._open_journal()

    @property
    def fresh(self) -> bool:
        """Nothing was ever captured into this data dir."""
        return self.state.position is None and self.state.snapshot == "none"

    def _load(self) -> CaptureState:
        state_path = self._dir / STATE_FILE
        try:
            state = CaptureState.from_json(json.loads(state_path.read_text()))
        except FileNotFoundError:
            state = CaptureState()
        except (OSError, ValueError, KeyError) as exc:
            raise StoreError(f"{state_path}: unreadable capture state: {exc}") from exc
        for record in self._read_records():
            if int(record["seq"]) > state.seq:
                _apply(state, record)
        return state

    def _read_records(self) -> list[dict[str, Any]]:
        path = self._dir / JOURNAL_FILE
        try:
            lines = path.read_bytes().split(b"\n")
        except FileNotFoundError:
            return []
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                if number < len(lines) - 1 or line.endswith(b"\n"):
                    raise StoreError(f"{path}: line {number} is not a record") from None
                log.warning("%s: ignoring a torn last record", path)
        return records

    def _open_journal(self) -> Any:
        try:
            return (self._dir / JOURNAL_FILE).open("ab")
        except OSError as exc:
            raise StoreError(f"{self._dir / JOURNAL_FILE}: cannot open: {exc.strerror}") from exc

    def append(self, record: dict[str, Any]) -> None:
        """Apply ``record`` to the state and make it durable (fsync when configured)."""
        record["seq"] = self.state.seq + 1
        line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        try:
            self._file.write(line)
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())
        except OSError as exc:
            raise StoreError(f"{self._dir / JOURNAL_FILE}: cannot append: {exc.strerror}") from exc
        _apply(self.state, record)
        self._records += 1
        if self._records >= COMPACT_EVERY:
            self.compact()

    def begin(self, start_ts: int) -> None:
        self.append({"r": "begin", "start_ts": start_ts})

    def commit(
        self, start_ts: int, commit_ts: int, position: Position, tables: dict[str, row_pb2.TableSchema | None]
    ) -> None:
        changed = {name: None if s is None else _schema_text(s) for name, s in tables.items()}
        self.append(
            {
                "r": "commit",
                "start_ts": start_ts,
                "commit_ts": commit_ts,
                "position": position.to_json(),
                "tables": changed,
            }
        )

    def shadow_before(self, db: str, tables: dict[str, str | None]) -> None:
        """Before a DDL runs on the shadow: how to put its tables back (see ``shadow_undo``)."""
        self.append({"r": "shadow", "db": db, "tables": tables})

    def moved(self, position: Position) -> None:
        """The position advanced over transactions that wrote nothing (no captured table)."""
        self.append({"r": "position", "position": position.to_json()})

    def settled(self) -> None:
        """The pending second phase was sent again after a restart."""
        self.append({"r": "settled"})

    def snapshot(self, phase: str, position: Position | None = None) -> None:
        """Snapshot progress: ``running`` (with the snapshot's position) or ``done``."""
        self.append({"r": "snapshot", "phase": phase, "position": position.to_json() if position else None})

    def compact(self) -> None:
        """Rewrite the state file from the state and start an empty journal."""
        try:
            write_atomically(self._dir / STATE_FILE, json.dumps(self.state.to_json()).encode())
            self._file.close()
            self._file = (self._dir / JOURNAL_FILE).open("wb")
            fsync_dir(self._dir)
        except OSError as exc:
            raise StoreError(f"{self._dir}: cannot rewrite the capture state: {exc.strerror}") from exc
        self._records = 0

    def close(self) -> None:
        self._file.close()


def _apply(state: CaptureState, record: dict[str, Any]) -> None:
    kind = record["r"]
    state.seq = int(record["seq"])
    if kind == "begin":
        state.pending = Pending(int(record["start_ts"]))
    elif kind == "shadow":
        state.shadow_undo = {"db": record["db"], "tables": record["tables"]}
    elif kind == "commit":
        state.shadow_undo = None
        state.pending = Pending(int(record["start_ts"]), int(record["commit_ts"]))
        state.position = Position.from_json(record["position"])
        for name, text in record.get("tables", {}).items():
            if text is None:
                state.tables.pop(name, None)
            else:
                state.tables[name] = _schema(text)
    elif kind == "position":
        state.position = Position.from_json(record["position"])
    elif kind == "settled":
        state.pending = state.shadow_undo = None
    elif kind == "snapshot":
        state.snapshot = str(record["phase"])
        if record.get("position"):
            state.position = Position.from_json(record["position"])

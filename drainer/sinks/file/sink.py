"""The ``file`` sink: binlog files for backup and point-in-time replay.

Configuration (``[sink.file]``):

==================  ============================  ===============================================
key                 default                       meaning
==================  ============================  ===============================================
``path``            ``<data-dir>/binlog-files``   the directory of ``binlog-NNNNNNNNNN.bbf`` files
``max-file-size``   67108864 (64 MiB)             rotate to a new file past this many bytes
==================  ============================  ===============================================

Every transaction and DDL is stored as its pulled binlog bytes with its
commit_ts (format: :mod:`drainer.sinks.file.binlogfile`); a transaction that
travelled in chunks (``TxnEvent.parts``) is stored as its parts, then its
final binlog, in one file. ``binlog-bridge replay`` applies a range of them
to a SQL downstream. Resolved events are not stored:
they only move the position ``flush`` reports.

Guarantees: ``flush`` fsyncs and returns the highest commit_ts written (or
resolved). After a crash, ``open`` truncates a torn tail and skips every
event at or below the highest commit_ts the files hold, so each event is
stored once. Each file's header carries the table schemas valid at its
start; the sink follows them through the DDL events it stores. A sink
starting on an empty directory while the drainer already tracks tables
(a checkpoint from before this sink existed) gets their schemas from the
context it is opened with (``SinkContext.schema_snapshot``); without them
those tables' rows are stored but a replay cannot decode them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.config import build
from bridge.errors import ConfigError
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable
from bridge.sink.events import DDLEvent, Event, ResolvedEvent, TxnEvent
from bridge.sink.schema import SchemaTrackError
from drainer.sinks.file.binlogfile import BinlogFileWriter

log = logging.getLogger(__name__)


@dataclass
class FileSinkConfig:
    path: str = field(default="", metadata={"help": "directory of the binlog files"})
    max_file_size: int = field(default=64 << 20, metadata={"help": "bytes after which a new file starts"})

    def validate(self) -> None:
        if self.max_file_size < 4096:
            raise ConfigError(f"sink.file.max-file-size: at least 4096 bytes, got {self.max_file_size}")


class FileSink(Sink):
    """See the module docstring. Built as ``FileSink(config_table, data_dir)``."""

    name = "file"

    def __init__(self, config_table: Mapping[str, Any], data_dir: Path) -> None:
        self.config = build(FileSinkConfig, config_table, prefix="sink.file.")
        self.directory = Path(self.config.path) if self.config.path else Path(data_dir) / "binlog-files"
        self._writer = BinlogFileWriter(self.directory, self.config.max_file_size)
        self._position = 0
        self._open = False

    def open(self, context: SinkContext) -> None:
        super().open(context)
        resume_ts = context.resume_ts
        try:
            # The snapshot is used only when no file exists yet (the first file's header).
            stored = self._writer.open(context.schema_snapshot)
        except (OSError, SchemaTrackError) as exc:
            raise SinkError(f"file sink {self.directory}: cannot recover the binlog files: {exc}") from exc
        self._position = max(stored, resume_ts)
        self._open = True
        log.info("file sink %s open: stored up to %d, resuming after %d", self.directory, stored, resume_ts)

    def write(self, events: Sequence[Event]) -> None:
        if not self._open:
            raise SinkError("file sink: not open")
        self._position, _ = append_events(self._writer, events, self._position, f"file sink {self.directory}")

    def flush(self) -> int:
        try:
            self._writer.sync()
        except OSError as exc:
            # After a failed fsync the kernel may have dropped the pages: nothing written is known durable.
            raise SinkError(f"file sink {self.directory}: fsync failed: {exc}") from exc
        return self._position

    def close(self) -> None:
        try:
            self._writer.close()
        except OSError as exc:
            raise SinkError(f"file sink {self.directory}: close failed: {exc}") from exc
        finally:
            self._open = False


def append_events(
    writer: BinlogFileWriter, events: Sequence[Event], position: int, where: str
) -> tuple[int, int]:
    """Append the row and DDL events of ``events`` above commit_ts ``position`` to ``writer``
    (resolved events only move the position); not synced. Returns the new position and the
    commit_ts of the last event appended (0: none). ``where`` starts error messages."""
    appended = 0
    # an earlier call that failed part-way left the events before the failure stored: not again
    position = max(position, writer.last_ts)
    for event in events:
        if event.commit_ts <= position:
            continue  # written already (a retry, or re-delivered after a restart)
        if not isinstance(event, ResolvedEvent):
            change = event.change if isinstance(event, DDLEvent) else None
            parts = event.parts() if isinstance(event, TxnEvent) and event.parts is not None else ()
            try:
                # a chunked transaction: its parts, then its final binlog, all or nothing
                writer.append(event.commit_ts, event.payload, change, parts)
            except OSError as exc:
                raise SinkUnavailable(f"{where}: commit_ts {event.commit_ts}: cannot write: {exc}") from exc
            except SchemaTrackError as exc:
                raise SinkApplyError(f"{where}: commit_ts {event.commit_ts}: {exc}") from exc
            appended = event.commit_ts
        position = event.commit_ts
    return position, appended

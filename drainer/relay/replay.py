"""Apply a range of the file sink's binlog files to a SQL downstream (the seeds' reparo).

:func:`replay` reads the files (:mod:`drainer.sinks.file.binlogfile`) from the one that
holds ``start_ts``, follows the schema from that file's header through every
DDL record (also those before ``start_ts``), builds events exactly as the
drainer does (:class:`drainer.builder.EventBuilder`) and writes those with
``start_ts <= commit_ts <= stop_ts`` to a sink, flushing in batches. The
parts of a transaction that travelled in chunks are gathered in a temporary
file (:class:`bridge.chunks.ChunkAssembler`) and decoded one at a time, as
the drainer does, so a replay's memory does not grow with a transaction's
size; parts at the end of the last file without their final binlog (the
writer was killed) are not applied.

The target's own checkpoint makes a replay resumable: the SQLite sink skips
what it has already applied, so running the same replay twice changes
nothing the second time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bridge.binlogscan import scan_header
from bridge.chunks import SpilledParts
from bridge.errors import ProtocolError, UserError
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.driver import SinkDriver, as_raised
from bridge.sink.events import DDLEvent, Event, TxnEvent
from bridge.sink.schema import SchemaTracker
from drainer.collect.merger import PulledTxn
from drainer.sinks.file.binlogfile import BinlogFileReader
from drainer.sync.builder import EventBuilder
from drainer.sync.filter import TableFilter

log = logging.getLogger(__name__)

MAX_TS = (1 << 63) - 1
BATCH_EVENTS = 512
BATCH_BYTES = 64 << 20
ATTEMPTS = 10  # calls of the sink that may fail retriably in a row before the replay gives up
RETRY_INITIAL, RETRY_MAX = 0.5, 8.0  # seconds between them, doubling


@dataclass
class ReplaySummary:
    files: int = 0
    txns: int = 0
    ddls: int = 0
    rows: int = 0
    first_ts: int = 0
    last_ts: int = 0
    applied_ts: int = 0  # what the sink reports durable at the end
    seconds: float = 0.0

    def line(self) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        return (
            f"replayed {self.txns} transactions ({self.rows} rows) and {self.ddls} DDLs "
            f"from {self.files} files, commit_ts {self.first_ts}..{self.last_ts}, "
            f"in {self.seconds:.1f}s ({rate:.0f} rows/s); downstream at commit_ts {self.applied_ts}"
        )


class _Batcher:
    """Writes events to the sink through its driver in bounded batches and counts them.

    The spilled parts of chunked transactions count toward a batch's size and are closed
    once the sink reports their transaction durable (the driver may write it again before)."""

    def __init__(self, driver: SinkDriver, summary: ReplaySummary) -> None:
        self.driver, self.summary = driver, summary
        self.events: list[Event] = []
        self.size = 0
        self.spilled: list[SpilledParts] = []

    def add(self, event: TxnEvent | DDLEvent, parts: SpilledParts | None = None) -> None:
        summary = self.summary
        summary.first_ts = summary.first_ts or event.commit_ts
        summary.last_ts = event.commit_ts
        if isinstance(event, TxnEvent):
            summary.txns += 1
            summary.rows += event.row_count
        else:
            summary.ddls += 1
        self.events.append(event)
        self.size += len(event.payload)
        if parts is not None:
            self.spilled.append(parts)
            self.size += parts.size
        if isinstance(event, DDLEvent) or len(self.events) >= BATCH_EVENTS or self.size >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.events:
            self.driver.write(self.events)
            self.events, self.size = [], 0
        applied = self.summary.applied_ts = self.driver.flush()
        if self.spilled:
            for parts in self.spilled:
                if parts.commit_ts <= applied:
                    parts.close()
            self.spilled = [parts for parts in self.spilled if not parts.closed]

    def close(self) -> None:
        for parts in self.spilled:
            parts.close()
        self.spilled = []


def replay(
    directory: Path,
    sink: Sink,
    start_ts: int = 0,
    stop_ts: int = MAX_TS,
    progress: Callable[[str], None] | None = None,
    context: SinkContext | None = None,
    spill_dir: Path | None = None,
) -> ReplaySummary:
    """Apply the stored events with ``start_ts <= commit_ts <= stop_ts`` to ``sink``, opened here
    with ``context`` (default: resuming after ``start_ts - 1`` with the tables of the first
    file's header), through a :class:`~bridge.sink.driver.SinkDriver`: a retriable error is
    retried (``ATTEMPTS`` times at most); the sink's own error is raised when it gives up.
    The parts of chunked transactions are gathered in temporary files in ``spill_dir``
    (None: the system's temporary directory)."""
    reader = BinlogFileReader(directory, spill_dir)
    if not reader.files:
        raise UserError(f"replay: no binlog files in {directory}")
    first_file, snapshot = reader.start(start_ts)
    builder = EventBuilder(SchemaTracker.restore(snapshot), TableFilter())
    summary = ReplaySummary(files=len(reader.files) - first_file)
    started = time.monotonic()
    driver = SinkDriver(sink, threading.Event(), RETRY_INITIAL, RETRY_MAX, attempts=ATTEMPTS)
    with as_raised():
        driver.open(context or SinkContext.at(max(start_ts - 1, 0), snapshot))
        batcher = _Batcher(driver, summary)
        try:
            _apply(reader, first_file, builder, batcher, (start_ts, stop_ts), progress)
        finally:
            batcher.close()
            driver.close()
    summary.seconds = time.monotonic() - started
    log.info("%s", summary.line())
    return summary


def _apply(
    reader: BinlogFileReader,
    first_file: int,
    builder: EventBuilder,
    batcher: _Batcher,
    bounds: tuple[int, int],
    progress: Callable[[str], None] | None,
) -> None:
    start_ts, stop_ts = bounds
    summary = batcher.summary
    current: Path | None = None
    for stored in reader.events(first_file):
        if stored.commit_ts > stop_ts:
            break
        if stored.path != current and progress is not None:
            progress(f"{stored.path.name}: from commit_ts {stored.commit_ts} ({summary.rows} rows so far)")
        current = stored.path
        header = scan_header(stored.binlog)
        ddl = header.ddl_job_id > 0
        parts = stored.parts
        if stored.commit_ts < start_ts and not ddl:
            if parts is not None:
                parts.close()
            continue  # DDLs before the range still move the schema forward
        pulled = PulledTxn(header.start_ts, stored.commit_ts, stored.binlog, ddl, header.value_span, parts)
        event = builder.build(pulled).event
        if event is not None and stored.commit_ts >= start_ts:
            if not isinstance(event, TxnEvent | DDLEvent):
                raise ProtocolError(f"replay: unexpected event at commit_ts {stored.commit_ts}")
            batcher.add(event, parts)
        elif parts is not None:
            parts.close()  # filtered out: no sink reads it
    batcher.flush()

"""The loops of ``binlog-bridge consume``: print changes as read, or apply them in commit order.

Both loops stop on SIGTERM/SIGINT (after finishing the batch at hand: with
``--apply`` everything released is applied and the target's checkpoint
committed), after ``idle_timeout`` seconds without a data message (row
change, DDL event, tombstone: a live drainer sends watermarks forever), once
``until_ts`` is complete (every assigned partition's watermark at or past
it; with ``--apply`` everything up to it applied), or after
``max_messages`` printed/applied changes.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from bridge.apps.consume.apply import Applier
from bridge.apps.consume.items import DDLItem, EndItem, Item, ResolvedItem, RowItem, TombstoneItem
from bridge.apps.consume.jsonout import json_line
from bridge.apps.consume.ordering import ResolvedBuffer
from bridge.apps.consume.reader import ChangeReader
from bridge.apps.consume.retire import Retirements
from bridge.errors import BridgeError
from bridge.startup import stop_on_signals

log = logging.getLogger(__name__)

POLL_TIMEOUT = 0.25
PROGRESS_INTERVAL = 5.0
DDL_REFRESH_INTERVAL = 0.5  # re-list metadata this often while a DDL waits for its topic


class IncompleteError(BridgeError):
    """The run stopped (idle, signal) before ``--until-ts`` was complete."""


@dataclass
class Limits:
    until_ts: int | None = None
    idle_timeout: float | None = None
    max_messages: int | None = None


@dataclass
class Summary:
    """What a run did; :meth:`line` is the summary printed at the end."""

    mode: str
    released_ts: int = 0
    changes: int = 0  # rows printed/applied
    ddl: int = 0
    messages: int = 0
    duplicates: int = 0
    skipped: int = 0
    seconds: float = 0.0
    reason: str = ""
    extra: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        rate = self.changes / self.seconds if self.seconds > 0 else 0.0
        if self.mode == "print":
            return (
                f"consume: printed {self.changes} row changes and {self.ddl} DDL ({self.messages} messages "
                f"read; every partition complete up to commit_ts {self.released_ts}) in {self.seconds:.1f}s; "
                f"stopped: {self.reason}"
            )
        verb = "applied"
        return (
            f"consume: {verb} {self.changes} row changes and {self.ddl} DDL up to commit_ts "
            f"{self.released_ts} ({self.messages} messages read, {self.duplicates} duplicates dropped, "
            f"{self.skipped} already applied) in {self.seconds:.1f}s ({rate:,.0f} rows/s); stopped: "
            f"{self.reason}"
        )


def progress(message: str) -> None:
    print(f"consume: {message}", file=sys.stderr, flush=True)


class Loop:
    """What both modes share: polling, watermarks, topic discovery, stop conditions."""

    def __init__(
        self,
        reader: ChangeReader,
        buffer: ResolvedBuffer,
        limits: Limits,
        report: Callable[[str], None] = progress,
    ) -> None:
        self.reader, self.buffer, self.limits, self.report = reader, buffer, limits, report
        self.started = time.monotonic()
        self.last_message = self.started
        self._last_progress = self.started
        self._last_ddl_refresh = 0.0

    def refresh(self) -> None:
        awaited = self.buffer.awaited_topics()
        for topic in awaited:
            self.reader.want(topic)
        now = time.monotonic()
        force = bool(awaited) and now - self._last_ddl_refresh >= DDL_REFRESH_INTERVAL
        if force:
            self._last_ddl_refresh = now
        self.reader.refresh(force=force)

    def saw(self, items: list[Item]) -> None:
        """Data messages (rows, DDL, tombstones) reset the idle clock; watermarks do not: a live
        drainer sends them forever."""
        if any(isinstance(i, (RowItem, DDLItem, TombstoneItem)) for i in items):
            self.last_message = time.monotonic()

    def idle(self) -> bool:
        timeout = self.limits.idle_timeout
        return timeout is not None and time.monotonic() - self.last_message >= timeout

    def progress_due(self) -> bool:
        now = time.monotonic()
        if now - self._last_progress < PROGRESS_INTERVAL:
            return False
        self._last_progress = now
        return True

    def lag_text(self) -> str:
        lagging = ", ".join(f"{t}[{p}]={ts}" for (t, p), ts in self.buffer.lagging())
        waiting = self.buffer.awaited_topics()
        text = f"lowest watermarks {lagging or '-'}"
        if waiting:
            text += f"; waiting for topics {', '.join(sorted(waiting))}"
        return text


def run_print(reader: ChangeReader, limits: Limits, out: TextIO, *, show_resolved: bool = False) -> Summary:
    """Print every message as one JSON line, in the order read (per partition: the topic's order).

    With the reader's ``group``, the offsets of the messages printed (and of watermarks passed over)
    are committed after each batch is written and flushed to ``out``; a message held back by
    ``until_ts`` stops its partition's commits, so a later run with the same group prints it."""
    buffer = ResolvedBuffer()
    reader.on_assign = buffer.assign
    loop = Loop(reader, buffer, limits)
    summary = Summary("print")
    # with a prefix, --until-ts waits on every table topic: dropped tables' topics are retired as in --apply
    retirements = Retirements(reader.ddl_topic) if reader.ddl_topic and not reader.topics else None
    handled: dict[tuple[str, int], int] = {}  # per partition: the offset after the last one handled
    held: set[tuple[str, int]] = set()  # partitions with a message not printed (until_ts)

    def done(item: Item) -> None:
        place = (item.where.topic, item.where.partition)
        if place not in held:
            handled[place] = item.where.offset + 1

    with stop_on_signals("consume") as stop:
        reader.refresh(force=True)
        for topic in reader.missing_topics():
            loop.report(f"topic {topic} does not exist (yet); waiting for it")
        while not stop.is_set():
            loop.refresh()
            items = reader.poll(POLL_TIMEOUT)
            loop.saw(items)
            for item in items:
                if isinstance(item, ResolvedItem):
                    buffer.resolved(item.where.topic, item.where.partition, item.resolved_ts)
                    if not show_resolved:
                        done(item)
                        continue
                elif isinstance(item, (RowItem, DDLItem)):
                    if isinstance(item, DDLItem) and retirements is not None and buffer.add(item):
                        retirements.on_ddl(item, buffer)
                    if limits.until_ts is not None and item.commit_ts > limits.until_ts:
                        held.add((item.where.topic, item.where.partition))
                        continue
                    if isinstance(item, DDLItem):
                        summary.ddl += 1
                        reader.want(item.table_topic)  # a custom topic-template's topic (prefix mode)
                    else:
                        summary.changes += 1
                elif isinstance(item, EndItem):
                    if retirements is not None:
                        retirements.on_end(item, buffer)
                    continue
                elif isinstance(item, TombstoneItem):
                    pass
                out.write(json_line(item) + "\n")
                done(item)
                if limits.max_messages is not None and summary.changes + summary.ddl >= limits.max_messages:
                    summary.reason = f"--max-messages {limits.max_messages}"
                    break
            out.flush()
            reader.commit(handled)  # --group: only what is printed (and flushed) above
            if summary.reason:
                break
            if retirements is not None:
                retirements.step(buffer, reader)
                buffer.take_ready()  # only DDL events are buffered here, to drop re-deliveries
            summary.released_ts = buffer.watermark()
            if limits.until_ts is not None and buffer.assigned and summary.released_ts >= limits.until_ts:
                summary.reason = f"--until-ts {limits.until_ts} complete"
                break
            if loop.idle():
                summary.reason = f"idle for {limits.idle_timeout:g}s"
                break
            if loop.progress_due():
                loop.report(f"{reader.messages_read} messages read; watermark {buffer.watermark()}")
        else:
            summary.reason = "signal"
    summary.released_ts = buffer.watermark()
    summary.messages = reader.messages_read
    summary.seconds = time.monotonic() - loop.started
    return summary


def run_apply(reader: ChangeReader, applier: Applier, limits: Limits) -> Summary:
    """The resolved-ts contract (:mod:`bridge.apps.consume.ordering`) into ``applier``'s sink."""
    buffer = ResolvedBuffer()
    reader.on_assign = buffer.assign
    loop = Loop(reader, buffer, limits)
    summary = Summary("apply")
    retirements = Retirements(reader.ddl_topic)
    with stop_on_signals("consume") as stop, contextlib.closing(buffer):
        reader.refresh(force=True)
        if reader.ddl_topic not in reader.assigned:
            loop.report(f"DDL topic {reader.ddl_topic} does not exist (yet); waiting for it")
        while True:
            if stop.is_set():
                summary.reason = "signal"
                break
            loop.refresh()
            items = reader.poll(POLL_TIMEOUT)
            loop.saw(items)
            for item in items:
                if isinstance(item, ResolvedItem):
                    buffer.resolved(item.where.topic, item.where.partition, item.resolved_ts)
                elif isinstance(item, RowItem):
                    buffer.add(item)
                elif isinstance(item, DDLItem):
                    if buffer.add(item):
                        retirements.on_ddl(item, buffer)
                elif isinstance(item, EndItem):
                    retirements.on_end(item, buffer)
            retirements.step(buffer, reader)
            if reader.ddl_topic in reader.assigned:
                before = buffer.released_ts
                released, ready = buffer.take_ready(limits.until_ts)
                if released > before:
                    applier.apply(ready, released)
            summary.released_ts = buffer.released_ts
            if limits.until_ts is not None and buffer.released_ts >= limits.until_ts:
                summary.reason = f"--until-ts {limits.until_ts} applied"
                break
            if (
                limits.max_messages is not None
                and applier.stats.rows + applier.stats.ddl >= limits.max_messages
            ):
                summary.reason = f"--max-messages {limits.max_messages}"
                break
            if loop.idle():
                summary.reason = f"idle for {limits.idle_timeout:g}s"
                break
            if loop.progress_due():
                stats = applier.stats
                loop.report(
                    f"applied up to commit_ts {buffer.released_ts} ({stats.rows} rows, {stats.ddl} DDL); "
                    f"{reader.messages_read} messages read, {buffer.stats.buffered} buffered; "
                    + loop.lag_text()
                )
    summary.messages = reader.messages_read
    summary.changes = applier.stats.rows
    summary.ddl = applier.stats.ddl
    summary.skipped = applier.stats.skipped
    summary.duplicates = buffer.stats.duplicates
    summary.seconds = time.monotonic() - loop.started
    if limits.until_ts is not None and buffer.released_ts < limits.until_ts:
        raise IncompleteError(
            f"stopped ({summary.reason}) before --until-ts {limits.until_ts} was complete: applied up to "
            f"commit_ts {buffer.released_ts}; {loop.lag_text()}"
        )
    return summary

"""Late Commits: a pump refuses a Commit it would not deliver, instead of acknowledging it.

A Commit is acknowledged once durable, and the sorter pairs it later (see
:mod:`pump.storage.sorter`). Two kinds of Commit would be stored and then
never delivered; :class:`LateCommitGate` refuses them before they are written:

- **settled**: the lost-commit sweeper already settled the Prewrite of this
  start_ts (``max-txn-timeout`` passed): it discarded it (the resolver said
  "not committed", or ``resolver.type = none``), or it wrote the Commit itself
  at another commit_ts. A Rollback is in the log; the sorter has forgotten the
  Prewrite. The gate remembers the last :data:`SETTLED_LIMIT` settlements,
  across restarts too: each is appended to ``settled.log`` in the data dir
  once its Rollback or Commit is durable (:class:`SettledLog`).
- **late**: its commit_ts is at or below the sorter's watermark, which never
  goes down: drainers may already hold later transactions of this pump, so it
  can no longer be delivered in order (``Sorter.would_drop_commit``). This
  also covers a settled Prewrite after a restart, once the watermark passed
  the Commit's commit_ts.

Not covered: a Commit for a Prewrite this pump never stored whose commit_ts
is passed only by records still on their way to the sorter (its watermark is
read as it stands); the sorter still drops it with an error log, as before.
A settlement whose ``settled.log`` line was not yet fsynced when the pump was
killed is only covered by the watermark rule after the restart.

A Commit the pump already holds (the same commit_ts paired, e.g. a retry, or
the Commit the resolver wrote for a transaction it found committed upstream)
is a duplicate and is acknowledged again, never refused.

The refusal is :class:`LateCommit`, a :class:`~bridge.errors.ProtocolError`
whose message starts with :data:`bridge.binlog.COMMIT_REFUSED_PREFIX` and
names the start_ts, what settled it and when. ``WriteBinlog`` turns it into
``FAILED_PRECONDITION``; in ``WriteBinlogs`` it is the binlog's errmsg; the
pump client raises :class:`~bridge.errors.CommitRefused` and does not retry.
Each refused Commit is counted once in ``bridge_pump_late_commits_refused_total``
and logged once.

Ordering: :meth:`LateCommitGate.settle` runs before the sweeper's Rollback is
submitted and :meth:`LateCommitGate.refusal` right before a Commit is
submitted, both on the event loop without an ``await`` in between, so a Commit
is either in the log before the Rollback (the sorter pairs it; the Rollback
then finds nothing) or refused.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bridge.binlog import COMMIT_REFUSED_PREFIX
from bridge.errors import ProtocolError
from bridge.tso import physical_ms
from pump import metrics
from pump.storage.sorter import COMMIT, Sorter
from pump.storage.writer import Record

log = logging.getLogger(__name__)

SETTLED_LIMIT = 100_000  # settlements remembered (oldest forgotten first): ~10 MB at most
_REPORTED_LIMIT = 10_000  # refused Commits remembered so a retry is not counted twice


class LateCommit(ProtocolError):
    """A Commit this pump refuses: it would be stored but never delivered."""


@dataclass(frozen=True, slots=True)
class Settlement:
    """How the sweeper settled a Prewrite: ``commit_ts`` None = discarded."""

    commit_ts: int | None
    by: str
    at: datetime.datetime

    @property
    def when(self) -> str:
        return self.at.isoformat(timespec="milliseconds")


class SettledLog:
    """``settled.log``: one line per settlement, ``start_ts commit_ts(0 = discarded)
    unix_ms by``, appended and fsynced after its binlog is durable. A torn last
    line (a crash mid-append) is skipped; the file is rewritten on open when it
    holds more than twice the lines kept."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self._limit = limit

    def load(self) -> Iterator[tuple[int, Settlement]]:
        try:
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return
        kept = lines[-self._limit :]
        if len(lines) > 2 * self._limit:
            self._rewrite(kept)
        for line in kept:
            parts = line.split(" ", 3)
            if len(parts) == 4 and all(part.isdigit() for part in parts[:3]):
                start_ts, commit_ts, at_ms = (int(part) for part in parts[:3])
                at = datetime.datetime.fromtimestamp(at_ms / 1000, tz=datetime.UTC)
                yield start_ts, Settlement(commit_ts or None, parts[3], at)

    def append(self, start_ts: int, settlement: Settlement) -> None:
        at_ms = int(settlement.at.timestamp() * 1000)
        line = f"{start_ts} {settlement.commit_ts or 0} {at_ms} {' '.join(settlement.by.split())}\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def _rewrite(self, lines: list[str]) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        with temporary.open("rb") as file:
            os.fsync(file.fileno())
        temporary.replace(self.path)


def _utc(ts_ms: float) -> str:
    moment = datetime.datetime.fromtimestamp(ts_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds")


class LateCommitGate:
    """See the module docstring. ``lock`` guards ``sorter`` (the chaser's lock)."""

    def __init__(
        self, sorter: Sorter, lock: threading.Lock, path: Path | None = None, limit: int = SETTLED_LIMIT
    ) -> None:
        self._sorter = sorter
        self._lock = lock
        self._limit = limit
        self._settled: OrderedDict[int, Settlement] = OrderedDict()
        self._reported: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._log = SettledLog(path, limit) if path is not None else None
        if self._log is not None:
            self._settled.update(self._log.load())

    def settle(self, start_ts: int, commit_ts: int | None, by: str) -> None:
        """Record that the sweeper settles ``start_ts`` now (before its binlog is submitted)."""
        self._settled[start_ts] = Settlement(commit_ts, by, datetime.datetime.now(datetime.UTC))
        self._settled.move_to_end(start_ts)
        while len(self._settled) > self._limit:
            self._settled.popitem(last=False)

    async def persist(self, start_ts: int) -> None:
        """Append the settlement of ``start_ts`` to ``settled.log`` (call once its
        binlog is durable). A failure is logged: the settlement still holds
        until this process ends."""
        settlement = self._settled.get(start_ts)
        if self._log is None or settlement is None:
            return
        try:
            await asyncio.to_thread(self._log.append, start_ts, settlement)
        except OSError as exc:
            path = self._log.path
            log.error("could not record the settlement of start_ts %d in %s: %s", start_ts, path, exc)

    def settlement(self, start_ts: int) -> Settlement | None:
        return self._settled.get(start_ts)

    def suspects(self, records: Sequence[Record]) -> bool:
        """Cheap test for every write: could any Commit of ``records`` be refused?"""
        settled, watermark = self._settled, self._sorter.watermark
        for _, tp, start_ts, commit_ts in records:  # a plain loop: this runs per binlog written
            if tp == COMMIT and (commit_ts <= watermark or start_ts in settled):
                return True
        return False

    def refusal(self, records: Sequence[Record]) -> str:
        """Why the first refused Commit of ``records`` is refused ("" = none is)."""
        for _, tp, start_ts, commit_ts in records:
            if tp == COMMIT and (reason := self._refusal(start_ts, commit_ts)):
                return reason
        return ""

    def refuse(self, records: Sequence[Record]) -> None:
        """Raise :class:`LateCommit` for the first refused Commit of ``records``,
        counting and logging each refused Commit once."""
        first = ""
        for _, tp, start_ts, commit_ts in records:
            if tp != COMMIT or not (reason := self._refusal(start_ts, commit_ts)):
                continue
            first = first or reason
            if (start_ts, commit_ts) not in self._reported:
                self._reported[start_ts, commit_ts] = None
                if len(self._reported) > _REPORTED_LIMIT:
                    self._reported.popitem(last=False)
                kind = "settled" if start_ts in self._settled else "late"
                metrics.LATE_COMMITS_REFUSED.labels(kind).inc()
                log.error("refused a Commit: %s", reason.removeprefix(COMMIT_REFUSED_PREFIX))
        if first:
            raise LateCommit(first)

    def _refusal(self, start_ts: int, commit_ts: int) -> str:
        with self._lock:
            if self._sorter.holds_commit(commit_ts):
                return ""  # a duplicate: acknowledged again
            late = self._sorter.would_drop_commit(commit_ts)
            watermark = self._sorter.watermark
        settled = self._settled.get(start_ts)
        what = f"{COMMIT_REFUSED_PREFIX}Commit of start_ts {start_ts} at commit_ts {commit_ts}"
        if settled is not None and settled.commit_ts is None:
            return (
                f"{what}: its Prewrite was discarded by {settled.by} at {settled.when} (not committed "
                "within max-txn-timeout); the transaction will not be replicated"
            )
        if settled is not None and settled.commit_ts != commit_ts:
            return (
                f"{what}: {settled.by} found it committed at commit_ts {settled.commit_ts} and wrote that "
                f"Commit at {settled.when}"
            )
        if late:
            return (
                f"{what}: the pump's watermark {watermark} (~{_utc(physical_ms(watermark))}) has passed "
                "its commit_ts (its Prewrite was settled or never stored here), so it can no longer be "
                "delivered in order; the transaction will not be replicated"
            )
        return ""

"""The relay log: every event is stored locally before the sink applies it.

A SQL sink applies a transaction in pieces (workers, batches), so a drainer
killed mid-batch leaves the downstream between two upstream snapshots. When
the pumps (the meta service) are then unreachable, the drainer cannot pull
those transactions again; the relay log holds them. This is the original
drainer's relay log (``[syncer.relay]``), for any sink.

**Writing** (:class:`RelaySink`, wrapped around the built sink when
``[relay] dir`` is set)::

    write(events) -> append each event to the relay files, fsync -> inner.write(events)
    flush()       -> inner.flush() = position -> remove relay files whose events are all <= position

The files are the file sink's format (:mod:`drainer.sinks.file.binlogfile`): each
file's header carries the highest commit_ts before it and the schema
snapshot valid there, so a file decodes alone; a torn tail (a crash in the
middle of an append) is truncated when the relay is opened again, and so are
the parts of a chunked transaction whose final binlog was not written yet (a
transaction's parts and final binlog share its commit_ts and one file; the
relay counts it written only once the final is, so a restart writes it again
whole). A file rotates once it reaches ``max-file-size``, always between
transactions; the file being written is never removed. ``relay-meta.json`` in the directory names
the cluster the relay belongs to, so a recovery that cannot ask the meta
service knows whose checkpoint to read, and a relay directory of another
cluster is refused.

On a normal start the relay is reused when it holds events above the
checkpoint (they are not appended twice); a relay that ends below the
checkpoint holds nothing useful and is reset, and so is one holding a
transaction above the checkpoint that ``ignore-txn-commit-ts`` now skips (a
recovery must not apply it).

**Recovery**: :mod:`drainer.relay.recovery`.

Metrics: ``bridge_drainer_relay_bytes``, ``bridge_drainer_relay_files``,
``bridge_drainer_relay_ts``, ``bridge_drainer_relay_removed_files_total``;
``/status`` has the same under ``relay``.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Counter, Gauge

from bridge.durable import fsync_dir, write_atomically
from bridge.errors import ProtocolError, UserError
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.errors import SinkError
from bridge.sink.events import Event
from bridge.sink.schema import SchemaTrackError
from drainer.sinks.file.binlogfile import (
    KIND_HEADER,
    BinlogFileReader,
    BinlogFileWriter,
    TornTail,
    iter_records,
    list_files,
)
from drainer.sinks.file.sink import append_events

log = logging.getLogger(__name__)

META_NAME = "relay-meta.json"

RELAY_BYTES = Gauge("bridge_drainer_relay_bytes", "Bytes in the relay log files")
RELAY_FILES = Gauge("bridge_drainer_relay_files", "Relay log files on disk (the one being written included)")
RELAY_TS = Gauge("bridge_drainer_relay_ts", "commit_ts of the last event stored in the relay log")
RELAY_REMOVED = Counter(
    "bridge_drainer_relay_removed_files_total", "Relay log files removed once the sink had applied them"
)


class RelayError(UserError):
    """The relay log cannot be used as configured (another cluster's, unreadable)."""


# ---------------------------------------------------------------------- metadata


def read_cluster_id(directory: Path) -> int | None:
    """The cluster id ``relay-meta.json`` in ``directory`` names; None when there is none."""
    path = directory / META_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RelayError(f"relay.dir: cannot read {path}: {exc}") from None
    cluster_id = data.get("clusterID") if isinstance(data, dict) else None
    if not isinstance(cluster_id, int) or isinstance(cluster_id, bool) or cluster_id < 0:
        raise RelayError(f"relay.dir: {path} is not a relay metadata file (no clusterID)")
    return cluster_id


def write_cluster_id(directory: Path, cluster_id: int) -> None:
    """Write ``relay-meta.json`` atomically (temporary file, fsync, rename, fsync of the directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / META_NAME, json.dumps({"clusterID": cluster_id}).encode())


def _header_ts(path: Path) -> int | None:
    """A relay file's header prev_ts (every event of the file is above it); None if unreadable.

    None keeps the file and every file after it: a corrupt first record or one of a newer
    version (ProtocolError) is the recovery's to report when it reads the file, not a reason
    for the clean-up after a flush to fail the flush."""
    try:
        for record in iter_records(path):
            return record.commit_ts if record.kind == KIND_HEADER else None
    except (TornTail, OSError):
        return None
    except ProtocolError as exc:
        log.warning("relay: %s: first record unreadable (%s); kept, with the files after it", path, exc)
        return None
    return None


@dataclass(frozen=True)
class RelayUsage:
    files: int
    bytes: int


def usage(directory: Path) -> RelayUsage:
    """How many relay files and bytes ``directory`` holds now."""
    files = total = 0
    for _, path in list_files(directory):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue  # removed meanwhile
        files += 1
    return RelayUsage(files, total)


def remove_files(directory: Path) -> int:
    """Remove every relay file (not the metadata); returns how many."""
    removed = 0
    for _, path in list_files(directory):
        path.unlink(missing_ok=True)
        removed += 1
    if removed:
        fsync_dir(directory)
    return removed


# ---------------------------------------------------------------------- writing


class RelaySink(Sink):
    """A sink that stores every event in the relay log before the inner sink gets it.

    See the module docstring. Used from the sink thread only, except
    :meth:`status` (reads counters and lists the directory).
    """

    def __init__(
        self, inner: Sink, directory: Path, max_file_size: int, ignored: frozenset[int] = frozenset()
    ) -> None:
        self.inner = inner
        self.ignored = ignored  # [filter] ignore-txn-commit-ts
        self.name = inner.name
        self.directory = directory
        self.max_file_size = max_file_size
        self._writer = BinlogFileWriter(directory, max_file_size)
        self._position = 0  # every event at or below it is in the relay (or needs no relaying)
        self.relayed_ts = 0  # commit_ts of the last event stored
        self.cluster_id: int | None = None
        self.removed_files = 0
        self._header_cache: dict[Path, int | None] = {}

    # -- Sink ---------------------------------------------------------------------

    def check(self) -> None:
        self.inner.check()

    def open(self, context: SinkContext) -> None:
        """Checks the relay belongs to ``context.cluster_id``, recovers the relay files (the
        context's schema snapshot is the first header when it starts afresh), then opens the inner sink."""
        super().open(context)
        self._claim(context.cluster_id)
        resume_ts = context.resume_ts
        try:
            self._writer.close()  # open is retried when the inner sink's open fails
            stored = self._writer.open(context.schema_snapshot)
            reason = ""
            if list_files(self.directory) and stored < resume_ts:
                # Everything relayed is applied: the relay's schema may be behind the
                # checkpoint's (DDLs it never saw), so start afresh from the checkpoint's.
                reason = f"ends at commit_ts {stored}, below the checkpoint {resume_ts}"
            elif skipped := self._ignored_in_relay(resume_ts):
                # An operator skips a relayed transaction (it stopped the drainer): a recovery
                # must never apply it, so the relay restarts from the checkpoint.
                reason = f"holds commit_ts {skipped}, now listed in ignore-txn-commit-ts"
            if reason:
                self._writer.close()
                removed = remove_files(self.directory)
                log.info("relay %s: %s: removed its %d files", self.directory, reason, removed)
                self._writer = BinlogFileWriter(self.directory, self.max_file_size)
                stored = self._writer.open(context.schema_snapshot)
            if not list_files(self.directory):
                self._writer.last_ts = resume_ts  # the first file's header: nothing at or below is relayed
        except (OSError, SchemaTrackError) as exc:
            raise SinkError(f"relay {self.directory}: cannot recover the relay files: {exc}") from exc
        self._position = max(stored, resume_ts)
        self.relayed_ts = stored
        RELAY_TS.set(stored)
        log.info(
            "relay %s open: holds events up to commit_ts %d, resuming after %d",
            self.directory,
            stored,
            resume_ts,
        )
        self._update_usage()
        self.inner.open(context)

    def _claim(self, cluster_id: int) -> None:
        """Record (or check) the cluster the relay belongs to; refuses another cluster's relay."""
        try:
            stored = read_cluster_id(self.directory)
            if stored is not None and stored != cluster_id and list_files(self.directory):
                raise RelayError(
                    f"relay.dir: {self.directory} holds the relay log of cluster {stored}, this is "
                    f"cluster {cluster_id}; point relay.dir elsewhere or remove that directory"
                )
            if stored != cluster_id:
                write_cluster_id(self.directory, cluster_id)
        except OSError as exc:
            raise RelayError(f"relay.dir: cannot write {self.directory / META_NAME}: {exc}") from exc
        self.cluster_id = cluster_id

    def _ignored_in_relay(self, resume_ts: int) -> int:
        """The first relayed commit_ts above ``resume_ts`` listed in ``ignored``, or 0."""
        if not self.ignored:
            return 0
        for stored in BinlogFileReader(self.directory).events(parts=False):
            if stored.commit_ts > resume_ts and stored.commit_ts in self.ignored:
                return stored.commit_ts
        return 0

    def write(self, events: Sequence[Event]) -> None:
        where = f"relay {self.directory}"
        self._position, appended = append_events(self._writer, events, self._position, where)
        if appended:
            self.relayed_ts = appended
            try:
                self._writer.sync()
            except OSError as exc:
                # After a failed fsync the pages may be gone: nothing appended is known durable.
                raise SinkError(f"relay {self.directory}: fsync failed: {exc}") from exc
            RELAY_TS.set(self.relayed_ts)
        self.inner.write(events)

    def flush(self) -> int:
        position = self.inner.flush()
        self._collect(position)
        return position

    def close(self) -> None:
        try:
            self._writer.close()
        except OSError as exc:
            log.warning("relay %s: close failed: %s", self.directory, exc)
        finally:
            self.inner.close()

    # -- garbage collection and status --------------------------------------------

    def _collect(self, applied: int) -> None:
        """Remove the files all of whose events are at or below ``applied`` (never the last one)."""
        files = list_files(self.directory)
        removed = 0
        for (_, path), (_, next_path) in itertools.pairwise(files):
            if next_path not in self._header_cache:
                self._header_cache[next_path] = _header_ts(next_path)
            after = self._header_cache[next_path]  # every event of `path` is at or below it
            if after is None or after > applied:
                break
            try:
                path.unlink()
            except OSError as exc:
                log.warning("relay %s: cannot remove %s: %s", self.directory, path.name, exc)
                break
            self._header_cache.pop(path, None)
            removed += 1
        if removed:
            self.removed_files += removed
            RELAY_REMOVED.inc(removed)
            log.debug("relay %s: removed %d applied files (applied to %d)", self.directory, removed, applied)
        self._update_usage()

    def _update_usage(self) -> RelayUsage:
        now = usage(self.directory)
        RELAY_FILES.set(now.files)
        RELAY_BYTES.set(now.bytes)
        return now

    def status(self) -> dict[str, object]:
        now = self._update_usage()
        return {
            "dir": str(self.directory),
            "files": now.files,
            "bytes": now.bytes,
            "relayed_ts": self.relayed_ts,
            "removed_files": self.removed_files,
        }

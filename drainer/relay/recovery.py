"""Relay-log recovery: a start that cannot reach the meta service applies the relay log.

**Recovery** (:func:`recover`, called by :func:`drainer.app.serve`): when the
meta service is unreachable at start, the relay belongs to a cluster whose
checkpoint is not ``consistent``, the relay events above the checkpoint are
applied through the normal build path (:func:`drainer.replay.replay`) with
the sink opened in safe mode (``SinkContext.safe_mode``: a SQL sink applies
INSERT as REPLACE, UPDATE as DELETE + REPLACE; the SQLite sink skips by its
own checkpoint), so the events the sink had already applied are applied
again harmlessly. The checkpoint is then
saved at the last relayed commit_ts with ``consistent = true``, the relay
files are removed and the drainer exits 0. The downstream then equals the
upstream snapshot at that commit_ts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from bridge.errors import BridgeError, ProtocolError
from bridge.sink.contract import SinkContext
from bridge.sink.registry import build_sink
from bridge.sink.schema import SchemaTracker, SchemaTrackError
from drainer.checkpoint import CheckpointState, build_checkpoint
from drainer.config import DrainerConfig
from drainer.relay.replay import ReplaySummary, replay
from drainer.relay.sink import RELAY_REMOVED, RelayError, read_cluster_id, remove_files
from drainer.sinks.file.binlogfile import BinlogFileReader, BinlogFileWriter, apply_ddl_record, list_files
from drainer.sync.route import Router, routed

log = logging.getLogger(__name__)


@dataclass
class Recovery:
    """What :func:`recover` did."""

    cluster_id: int
    checkpoint_ts: int  # the checkpoint found
    consistent_ts: int  # the consistent checkpoint saved
    summary: ReplaySummary

    def line(self) -> str:
        s = self.summary
        return (
            f"relay recovery of cluster {self.cluster_id}: checkpoint was at commit_ts {self.checkpoint_ts} "
            f"(not consistent); replayed {s.txns} transactions ({s.rows} rows) and {s.ddls} DDLs from "
            f"{s.files} relay files in {s.seconds:.1f}s; checkpoint now at commit_ts {self.consistent_ts}, "
            f"consistent"
        )


def recover(config: DrainerConfig) -> Recovery | None:
    """Bring the downstream to a consistent snapshot from the relay log (see the module docstring).

    Returns None, after logging why, when there is nothing to recover (no
    relay configured or none on disk, no checkpoint, a consistent one).
    """
    if not config.relay.enabled:
        return None
    data_dir = Path(config.data_dir)
    directory = config.relay.directory(data_dir)
    cluster_id = read_cluster_id(directory)
    if cluster_id is None or not list_files(directory):
        log.info("relay %s: no relay log to recover from", directory)
        return None
    checkpoint = build_checkpoint(config.checkpoint.table(), data_dir, cluster_id)
    try:
        state = checkpoint.load()
        if state is None:
            log.info(
                "relay %s: no checkpoint of cluster %d in %s", directory, cluster_id, checkpoint.describe()
            )
            return None
        if state.consistent:
            log.info(
                "relay %s: the checkpoint in %s is consistent (commit_ts %d): nothing to recover",
                directory,
                checkpoint.describe(),
                state.commit_ts,
            )
            return None
        log.info(
            "relay %s: checkpoint of cluster %d at commit_ts %d is not consistent: replaying the relay log",
            directory,
            cluster_id,
            state.commit_ts,
        )
        # Truncates a torn tail and finds the last relayed event.
        writer = BinlogFileWriter(directory, config.relay.max_file_size)
        try:
            last_ts = writer.open()
        except (OSError, SchemaTrackError) as exc:
            raise RelayError(f"relay {directory}: cannot recover the relay files: {exc}") from exc
        finally:
            writer.close()
        summary = ReplaySummary()
        if last_ts > state.commit_ts:
            summary = _replay(config, directory, cluster_id, state)
            snapshot = schema_after(directory, state)
        else:
            last_ts, snapshot = state.commit_ts, state.schema
            log.info("relay %s: no event above the checkpoint (relay ends at %d)", directory, last_ts)
        checkpoint.save(CheckpointState(last_ts, snapshot, consistent=True))
    finally:
        checkpoint.close()
    removed = remove_files(directory)
    log.info("relay %s: removed its %d applied files", directory, removed)
    RELAY_REMOVED.inc(removed)
    return Recovery(cluster_id, state.commit_ts, last_ts, summary)


def schema_after(directory: Path, state: CheckpointState) -> bytes:
    """The schema snapshot after the relayed DDLs above the checkpoint.

    Built on the checkpoint's snapshot rather than the relay headers': the
    checkpoint's also knows the tables the filter leaves out (their DDLs never
    reach a sink, so never the relay), which a later start still needs.
    """
    tracker = SchemaTracker.restore(state.schema)
    try:
        for stored in BinlogFileReader(directory).events(parts=False):
            if stored.commit_ts > state.commit_ts:
                apply_ddl_record(tracker, stored.binlog)
    except (SchemaTrackError, ProtocolError) as exc:
        raise RelayError(f"relay {directory}: cannot follow the relayed DDLs: {exc}") from exc
    return tracker.snapshot()


def _replay(config: DrainerConfig, directory: Path, cluster_id: int, state: CheckpointState) -> ReplaySummary:
    sink = build_sink(config.sink.types, config.sink.tables, Path(config.data_dir))
    sink = routed(sink, Router.from_config(config.route))  # the names the drainer's sink writes to
    # Safe mode: the events above the checkpoint may be applied in part already.
    context = SinkContext.at(
        state.commit_ts, state.schema, cluster_id=cluster_id, safe_mode=True, data_dir=Path(config.data_dir)
    )
    log.info("sink %s: replaying the relay log in safe mode", sink.name)
    try:
        summary = replay(
            directory,
            sink,
            start_ts=state.commit_ts + 1,
            progress=lambda line: log.info("relay replay: %s", line),
            context=context,
            spill_dir=_spill_dir(config),
        )
    except BridgeError as exc:
        raise RelayError(
            f"relay {directory}: replay after commit_ts {state.commit_ts} failed: {exc} "
            f"(the checkpoint stays at {state.commit_ts}, not consistent; fix the cause and start again)"
        ) from exc
    if summary.applied_ts < summary.last_ts:
        raise RelayError(
            f"relay {directory}: the sink reports commit_ts {summary.applied_ts} durable after replaying "
            f"up to {summary.last_ts}; the checkpoint stays at {state.commit_ts}"
        )
    return summary


def _spill_dir(config: DrainerConfig) -> Path:
    """Where chunked transactions' parts are gathered during a recovery: the drainer's spill-dir."""
    directory = config.spill_directory()
    directory.mkdir(parents=True, exist_ok=True)
    return directory

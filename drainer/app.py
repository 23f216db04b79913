"""Running a drainer: every part wired together, started in order, stopped in reverse.

Start (:func:`serve`)::

    meta service: the cluster id              (MetaUnavailable: relay recovery, below, or the
                                              drainer does not start)
    checkpoint: load it, or initial-commit-ts (CheckpointError: unreadable, another cluster's, locked)
    schema tracker from the checkpoint's snapshot; the sink built from [sink]
    sink pre-flight: Sink.check()             (SinkCheckFailed: one line, exit 2, never registered)
    gRPC: bind addr (Notify)                  answered once the collector has read the registry
    HTTP status endpoint
    node: register ONLINE                     before reading the pumps, so a pump joining from
                                              now on notifies this drainer
    collector: read the pumps, start pulling
    syncer: open the sink at the checkpoint, replicate
    -> "drainer ready: node_id=... addr=... status=..." on stderr

Then it runs until ``stop`` is set (SIGTERM, SIGINT): the syncer writes what
it built, flushes and saves a consistent checkpoint, the sink is closed, the
node registers PAUSED with the final checkpoint. A halt (a transaction the
drainer cannot replicate), a sink that fails for good or a malformed pump
stream stops it the same way, keeping the checkpoint below the fault, but
the node registers FAILED with the error and its time, and :func:`serve`
raises the error. After SIGKILL the next start resumes from
the last checkpoint; sinks take the re-delivered events per their contract.

With a relay log (``[relay] dir``) the sink is wrapped in a
:class:`~drainer.relay.RelaySink`. When the meta service is unreachable at
start and the relay log belongs to a cluster whose checkpoint is not
consistent, :func:`serve` replays the relay log into the sink, saves a
consistent checkpoint and returns (the process exits 0) instead of
starting; see :mod:`drainer.relay.recovery` and docs/drainer-recovery.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from bridge.auth import adopt_token, use_cluster_token
from bridge.config import describe
from bridge.errors import BridgeError, MetaUnavailable
from bridge.grpcutil import add_port, channel_options, server_interceptors, use_keepalive
from bridge.meta.client import MetaClient
from bridge.meta.nodes import wall_time
from bridge.proto import drainer_pb2_grpc
from bridge.sink.contract import SinkContext
from bridge.sink.registry import build_sink
from bridge.sink.schema import SchemaTracker
from bridge.status_http import server_ssl_context
from bridge.tso import physical_ms, to_datetime
from drainer import metrics
from drainer.checkpoint import Checkpoint, CheckpointState, build_checkpoint, interrupt
from drainer.collect.collector import Collector
from drainer.collect.merger import MergeFeed, Merger
from drainer.collect.pull import PumpPuller
from drainer.config import DrainerConfig
from drainer.http import StatusServer
from drainer.relay.recovery import recover
from drainer.relay.sink import RelaySink
from drainer.server import CisternService, DrainerNode, NodeSettings
from drainer.sync.builder import EventBuilder
from drainer.sync.deadletter import DeadLetter
from drainer.sync.route import Router, routed
from drainer.sync.syncer import Syncer, SyncSettings

log = logging.getLogger(__name__)

STOP_GRACE = 2.0

Ready = Callable[[str], None]


def print_ready(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def lag_seconds(ts: int, now: float | None = None) -> float | None:
    """Seconds between ``now`` and the physical time of ``ts`` (None for ts 0)."""
    if ts <= 0:
        return None
    return max((now if now is not None else time.time()) - physical_ms(ts) / 1000, 0.0)


def starting_state(checkpoint: Checkpoint, initial_commit_ts: int) -> CheckpointState:
    state = checkpoint.load()
    if state is None:
        log.info(
            "no checkpoint in %s: starting after initial-commit-ts %d",
            checkpoint.describe(),
            initial_commit_ts,
        )
        return CheckpointState(initial_commit_ts)
    log.info(
        "checkpoint in %s: resuming after commit_ts %d (%s)",
        checkpoint.describe(),
        state.commit_ts,
        "clean stop" if state.consistent else "not a clean stop; the sink may see events again",
    )
    return state


def dead_letter_for(config: DrainerConfig, tracker: SchemaTracker) -> DeadLetter | None:
    """The dead-letter store of ``[skip] on-error = "skip-and-log"`` (None for "halt")."""
    if config.skip.on_error != "skip-and-log":
        return None
    return DeadLetter(Path(config.data_dir) / config.skip.dead_letter_dir, tracker.snapshot)


class Drainer:
    """The parts of one running drainer (what ``/status`` reports on)."""

    def __init__(
        self, config: DrainerConfig, cluster_id: int, meta: MetaClient, checkpoint: Checkpoint
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        data_dir = Path(config.data_dir)
        self.spill_dir = config.spill_directory()
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        start = starting_state(checkpoint, config.initial_commit_ts)
        tracker = SchemaTracker.restore(start.schema)
        filters = config.filter
        ignored = frozenset(filters.ignore_txn_commit_ts)
        dead_letter = dead_letter_for(config, tracker)
        on_skip = dead_letter.store if dead_letter is not None else None
        builder = EventBuilder(tracker, filters.table_filter(), ignored, config.skip.rules(), on_skip)
        sink = self.sink = build_sink(config.sink.types, config.sink.tables, data_dir)
        sink = routed(sink, Router.from_config(config.route))
        self.relay: RelaySink | None = None
        if config.relay.enabled:
            relay_dir = config.relay.directory(data_dir)
            sink = self.relay = RelaySink(sink, relay_dir, config.relay.max_file_size, ignored)
        self.merger = Merger(start.commit_ts, max_bytes=config.pump_buffer_bytes)
        self.feed = MergeFeed(self.merger)
        context = SinkContext(cluster_id=cluster_id, data_dir=data_dir)
        sync_settings = SyncSettings.from_config(config)
        self.syncer = Syncer(self.feed, builder, sink, checkpoint, start, sync_settings, context, dead_letter)
        self.server = grpc.aio.server(
            options=channel_options(config.max_message_size, config.keepalive),
            interceptors=[*use_cluster_token(config.cluster_token), *server_interceptors(config.security)],
        )
        port = add_port(self.server, config.addr, config.security)
        settings = NodeSettings(
            node_id=config.node_name(port),
            addr=config.advertise(port),
            cluster_id=cluster_id,
            heartbeat_interval=config.heartbeat_interval,
            ttl_ms=config.heartbeat_ttl_ms,
        )
        self.node = DrainerNode(settings, meta, lambda: self.syncer.checkpoint_ts)
        self.collector = Collector(meta, self.feed, self._puller, lambda: self.node.reported_ts)
        service = CisternService(self.collector)
        drainer_pb2_grpc.add_CisternServicer_to_server(service, self.server)  # type: ignore[no-untyped-call]
        self.closing = asyncio.Event()
        self.http = StatusServer(
            self.status,
            self.refresh_metrics,
            self.close,
            *config.status_listen(),
            server_ssl_context(config.security),
        )

    def close(self) -> dict[str, object]:
        """Stop cleanly and register OFFLINE (``POST /state/close``)."""
        log.info("closing for good: stopping, then registering offline")
        self.node.close_for_good()
        self.closing.set()
        return {**self.status(), "state": "CLOSING"}

    def _puller(self, name: str, addr: str) -> PumpPuller:
        config = self.config
        return PumpPuller(
            name,
            addr,
            self.cluster_id,
            self.feed,
            config.security,
            config.max_message_size,
            unreachable_after=config.pump_unreachable_timeout,
            spill_dir=self.spill_dir,
        )

    def refresh_metrics(self) -> None:
        self.collector.refresh_metrics()
        lag = lag_seconds(self.syncer.checkpoint_ts)
        metrics.LAG_SECONDS.set(lag if lag is not None else float("nan"))

    def status(self) -> dict[str, object]:
        self.refresh_metrics()
        checkpoint_ts = self.syncer.checkpoint_ts
        failed = self.collector.failed
        return {
            "node_id": self.node.node_id,
            "addr": self.node.settings.addr,
            "cluster_id": self.cluster_id,
            "state": self.node.state,
            "checkpoint_ts": checkpoint_ts,
            "checkpoint_time": to_datetime(checkpoint_ts).isoformat() if checkpoint_ts else None,
            "lag_seconds": lag_seconds(checkpoint_ts),
            "resolved_ts": self.merger.resolved,
            "duplicates_dropped": self.merger.duplicates,
            "pumps": self.collector.status(),
            "sink": self.syncer.status(),
            "relay": self.relay.status() if self.relay is not None else None,
            "failed": {"error": self.node.error, "time": wall_time(self.node.error_ms)}
            if self.node.error
            else None,
            "errors": {
                "heartbeat": self.node.last_error or None,
                "halted": str(self.syncer.halted) if self.syncer.halted else None,
                "pull": str(failed.exception()) if failed.done() and not failed.cancelled() else None,
            },
        }


async def serve(config: DrainerConfig, stop: asyncio.Event, ready: Ready = print_ready) -> None:
    """Run the drainer until ``stop`` is set; see the module docstring."""
    for line in describe(config):
        log.info("config: %s", line)
    adopt_token(config.cluster_token)  # before any channel opens: each presents it
    use_keepalive(config.keepalive)  # likewise: each pings with it
    Path(config.data_dir).mkdir(parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        meta = MetaClient(config.meta_addrs(), config.security)
        stack.push_async_callback(meta.close)
        try:
            cluster_id = await meta.cluster_id()
        except MetaUnavailable as exc:
            if not config.relay.enabled:
                raise
            log.warning("meta service unreachable (%s): looking for a relay log to recover from", exc)
            recovery = await asyncio.to_thread(recover, config)
            if recovery is None:
                raise
            log.info("%s; exiting", recovery.line())
            return
        checkpoint = build_checkpoint(config.checkpoint.table(), Path(config.data_dir), cluster_id)
        stack.callback(checkpoint.close)
        drainer = Drainer(config, cluster_id, meta, checkpoint)
        if drainer.syncer.dead_letter is not None:
            stack.callback(drainer.syncer.dead_letter.close)
        await asyncio.to_thread(drainer.sink.check)  # SinkCheckFailed: not ready, not registered
        await drainer.server.start()
        stack.push_async_callback(drainer.server.stop, STOP_GRACE)
        await drainer.http.start()
        stack.push_async_callback(drainer.http.stop)
        status_addr = config.status_advertise(drainer.http.port)
        drainer.node.settings = dataclasses.replace(drainer.node.settings, status_addr=status_addr)
        await drainer.node.start()
        stack.push_async_callback(drainer.node.stop)
        await drainer.collector.start()
        stack.push_async_callback(drainer.collector.stop)
        syncing = asyncio.create_task(drainer.syncer.run(), name="drainer-syncer")
        ready(
            f"drainer ready: node_id={drainer.node.node_id} addr={drainer.node.settings.addr} "
            f"status={status_addr}"
        )
        await _run_until_stopped(drainer, syncing, stop, checkpoint)


def check_sink(config: DrainerConfig) -> str:
    """``drainer --check``: build the sink from ``[sink]`` and run its pre-flight check only
    (no meta service, checkpoint or ports); raises :class:`~bridge.sink.errors.SinkCheckFailed`."""
    sink = build_sink(config.sink.types, config.sink.tables, Path(config.data_dir))
    sink.check()
    return f"drainer check passed: sink {sink.name} can be used"


async def _run_until_stopped(
    drainer: Drainer, syncing: asyncio.Task[None], stop: asyncio.Event, checkpoint: Checkpoint
) -> None:
    stopping: asyncio.Future[None] = asyncio.ensure_future(_wait(stop))
    closing: asyncio.Future[None] = asyncio.ensure_future(_wait(drainer.closing))
    try:
        waits: set[asyncio.Future[None]] = {syncing, stopping, closing, drainer.collector.failed}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        closing.cancel()
    if not syncing.done():
        if stop.is_set() or drainer.closing.is_set():
            log.info("stopping: writing what is built, flushing, saving the checkpoint")
        drainer.syncer.stop()
        # The final flush and checkpoint save run first, on connections still open; only a syncer
        # busy after STOP_GRACE (a save retried against an unreachable target) is interrupted, so
        # SIGTERM still ends within seconds and the checkpoint stays at the last position saved.
        await asyncio.wait({syncing}, timeout=STOP_GRACE)
        if not syncing.done():
            interrupt(checkpoint)
    try:
        await syncing
    except BridgeError as exc:
        log.error("replication stopped: %s", exc)
        drainer.node.fail(str(exc))
        raise
    except Exception as exc:
        drainer.node.fail(f"{type(exc).__name__}: {exc}")
        raise
    log.info(
        "drainer %s stopped at checkpoint commit_ts %d", drainer.node.node_id, drainer.syncer.checkpoint_ts
    )
    failed = drainer.collector.failed
    error = failed.exception() if failed.done() and not failed.cancelled() else None
    if error is not None:
        drainer.node.fail(str(error))
        raise error


async def _wait(event: asyncio.Event) -> None:
    await event.wait()

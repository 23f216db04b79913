"""Running a pump: every part wired together, started in order, stopped in reverse.

Start (:func:`serve`)::

    meta service: the cluster id            (MetaUnavailable: the pump does not start)
    storage: open data-dir, recover         (DataDirLocked, CorruptLog)
    gRPC: bind addr, serve                  writes refused while joining; pulls served
    HTTP status endpoint
    background: lost-commit sweeper, fake-binlog ticker, GC
    node: register, join (Notify every drainer), go online
    -> "pump ready: node_id=... addr=... status=..." on stderr

Then it serves until ``stop`` is set (SIGTERM, SIGINT) or a close
(``POST /state/close``) has taken the pump OFFLINE. Stopping is not closing:
the registry entry keeps the state the pump had (so a restarted pump that
was online goes online again at once); writes in flight get ``STOP_GRACE``
seconds to finish, pull streams are ended, and the storage is closed cleanly.

Fake binlogs: every ``fake-binlog-interval`` the pump writes a fake binlog
with a fresh TSO timestamp, in every state but OFFLINE, so an idle pump's
watermark keeps moving and no drainer waits on it. A tick is skipped when a
Commit moved the pump's highest commit_ts since the last tick: the pump is
not idle, its watermark moves with its own traffic (a fake would cost a
GetTimestamps call and a group commit for nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
import time
from collections.abc import Awaitable, Callable

import grpc

from bridge.auth import adopt_token, use_cluster_token
from bridge.config import describe
from bridge.errors import BridgeError, MetaError
from bridge.grpcutil import add_port, channel_options, server_interceptors, use_keepalive
from bridge.meta.client import MetaClient
from pump import metrics
from pump.admission import PumpState
from pump.config import PumpConfig
from pump.gc import GarbageCollector
from pump.guard import TimestampGuard
from pump.health import DiskGuard
from pump.http import StatusServer, server_ssl_context
from pump.join import DrainerNotifier
from pump.node import NodeSettings, PumpNode
from pump.resolver import LostCommitSweeper, build_resolver
from pump.service import PumpService, add_to_server
from pump.storage import Storage, StorageError

log = logging.getLogger(__name__)

STOP_GRACE = 5.0  # seconds writes in flight get to finish when the pump stops
ERROR_LOG_EVERY = 10.0  # seconds between repeats of a failing fake binlog in the log

Ready = Callable[[str], None]


def print_ready(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class FakeBinlogTicker:
    """Writes a fake binlog with a fresh timestamp every ``interval`` seconds while the node is not
    OFFLINE and took no binlog since the last tick (as the seeds' pump: a pump that is written to is
    not idle, even while the commits it takes are older than its last fake binlog, as they are when
    the producers lag behind the timestamps they got); refreshes the storage gauges each time."""

    def __init__(self, meta: MetaClient, storage: Storage, node: PumpNode, interval: float) -> None:
        self._meta = meta
        self._storage = storage
        self._node = node
        self._interval = interval
        self._last_error_log = 0.0
        self._seen = storage.max_commit_ts  # the highest commit_ts or fake ts at the last tick
        self._written = storage.records_written  # the binlogs the storage had taken at the last tick

    async def write_one(self) -> int:
        """Write one fake binlog durably; returns its ts."""
        ts = await self._meta.get_timestamp()
        await self._storage.write_fake(ts)
        metrics.WRITES.labels("fake", "ok").inc()
        return ts

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.tick()

    async def tick(self) -> bool:
        """One tick: a fake binlog unless binlogs came since the last tick; whether one was written."""
        latest, storage = self._storage.max_commit_ts, self._storage
        wrote = False
        if latest > self._seen or storage.records_written > self._written:  # binlogs came: not idle
            self._seen = max(self._seen, latest)
        elif self._node.state is not PumpState.OFFLINE:
            try:
                self._seen = max(await self.write_one(), storage.max_commit_ts)
                wrote = True
            except (MetaError, StorageError) as exc:
                self._report(exc)
        self._written = storage.records_written  # its own fake binlog included
        metrics.STORAGE_BYTES.set(storage.size_bytes)
        metrics.GC_TS.set(storage.gc_ts)
        return wrote

    def _report(self, exc: Exception) -> None:
        metrics.WRITES.labels("fake", "error").inc()
        metrics.ERRORS.labels("fake_binlog").inc()
        now = time.monotonic()
        if now - self._last_error_log >= ERROR_LOG_EVERY:
            self._last_error_log = now
            log.warning("fake binlog not written (the watermark stands still): %s", exc)


def _bind(server: grpc.aio.Server, config: PumpConfig) -> int:
    return add_port(server, config.addr, config.security)  # its ConfigError names the key "addr"


async def _stop_grpc(server: grpc.aio.Server, service: PumpService) -> None:
    service.end_pulls()
    await server.stop(STOP_GRACE)


class _Background:
    """Tasks that run until the pump stops; one ending early is logged."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        task.add_done_callback(self._ended)
        self._tasks.append(task)

    @staticmethod
    def _ended(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            metrics.ERRORS.labels("background").inc()
            log.error("pump task %s stopped: %r", task.get_name(), exc, exc_info=exc)

    async def cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _first(main: Awaitable[None], stop: asyncio.Event) -> bool:
    """Run ``main`` until it ends (True; its exception raised) or ``stop`` is set (False)."""
    task = asyncio.ensure_future(main)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return False
    task.result()
    return True


async def serve(config: PumpConfig, stop: asyncio.Event, ready: Ready = print_ready) -> None:
    """Run the pump until ``stop`` is set or it went OFFLINE; see the module docstring."""
    for line in describe(config):
        log.info("config: %s", line)
    adopt_token(config.cluster_token)  # before any channel opens: each presents it
    use_keepalive(config.keepalive)  # likewise: each pings with it
    async with contextlib.AsyncExitStack() as stack:
        meta = MetaClient(config.meta_addrs(), config.security)
        stack.push_async_callback(meta.close)
        cluster_id = await meta.cluster_id()
        storage = await Storage.open(config.data_dir, config.storage)
        stack.push_async_callback(storage.close)
        # No SO_REUSEPORT: a second pump on the same address must fail, not share it.
        server = grpc.aio.server(
            options=[*channel_options(config.max_message_size, config.keepalive), ("grpc.so_reuseport", 0)],
            # No decode guard: the Pump service's own lenient parsers answer bad bodies (pump.wire).
            interceptors=[
                *use_cluster_token(config.cluster_token, decode_guard=False),
                *server_interceptors(config.security),
            ],
        )
        port = _bind(server, config)
        node = _build_node(config, cluster_id, port, meta, storage)
        guard = TimestampGuard(meta.get_timestamp, config.timestamp_slack)
        service = PumpService(
            cluster_id,
            node,
            storage,
            max_message_bytes=config.max_message_size,
            guard=guard,
            pull_interval=config.pull_interval,
        )
        add_to_server(service, server)
        await server.start()
        stack.push_async_callback(_stop_grpc, server, service)
        http = StatusServer(node, *config.status_listen(), server_ssl_context(config.security))
        await http.start()
        stack.push_async_callback(http.stop)
        # The registry shows the status port actually bound (status-addr may name port 0).
        node.settings = dataclasses.replace(node.settings, status_addr=config.status_advertise(http.port))
        await _start_background(stack, config, meta, storage, node)
        stack.push_async_callback(node.stop)
        if not await _first(node.start(), stop):
            log.info("pump %s: stopped while joining", node.node_id)
            return
        host, _ = config.status_listen()
        ready(f"pump ready: node_id={node.node_id} addr={node.settings.addr} status={host}:{http.port}")
        await _serve_until_stopped(node, stop)


def _build_node(
    config: PumpConfig, cluster_id: int, port: int, meta: MetaClient, storage: Storage
) -> PumpNode:
    async def final_fake() -> int:
        ts = await meta.get_timestamp()
        await storage.write_fake(ts)
        return ts

    return PumpNode(
        NodeSettings.from_config(config, cluster_id, port),
        meta,
        storage,
        final_fake,
        disk_guard=DiskGuard(config.data_dir, config.stop_write_at_available_space),
        notifier=DrainerNotifier(config.security),
        status_extras=lambda: {"storage_bytes": storage.size_bytes, "gc_ts": storage.gc_ts},
    )


async def _start_background(
    stack: contextlib.AsyncExitStack, config: PumpConfig, meta: MetaClient, storage: Storage, node: PumpNode
) -> None:
    resolver = build_resolver(config.resolver)
    stack.push_async_callback(resolver.close)
    background = _Background()
    stack.push_async_callback(background.cancel_all)
    sweeper = LostCommitSweeper(storage, resolver, config.max_txn_timeout, config.resolver.interval)
    background.start(sweeper.run(), "lost-commit-sweeper")
    ticker = FakeBinlogTicker(meta, storage, node, config.fake_binlog_interval)
    background.start(ticker.run(), "fake-binlog-ticker")
    if config.gc:
        collector = GarbageCollector(storage, meta, config.gc, max_retention=config.max_retention)
        log.info("GC: keeping %gs of binlogs, collecting every %gs", collector.retention, collector.interval)
        background.start(collector.run(), "gc")
    else:
        log.info("gc = 0: binlogs are kept forever")


async def _serve_until_stopped(node: PumpNode, stop: asyncio.Event) -> None:
    try:
        if await _first(node.wait_offline(), stop):
            log.info("pump %s is offline: exiting", node.node_id)
    except BridgeError:
        # PumpNode logged why; the pump stays closing and keeps serving pulls.
        log.error("pump %s: closing failed; serving until stopped", node.node_id)
        await stop.wait()
    else:
        if stop.is_set():
            log.info("pump %s: stopping (the registry keeps its state)", node.node_id)

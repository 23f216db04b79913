"""``AsyncPumpsClient``: writes each transaction's binlogs to the pump cluster.

The routing contract, which the synchronous :class:`~bridge.pumpclient.PumpsClient`
shares because it runs this code:

- A **Prewrite** (and a PreDDL/PostDDL) goes to the pump the strategy picks.
  If that pump fails, the next available pumps are tried at once; after a
  round in which every pump failed, the client pauses (``retry-backoff``,
  doubling up to ``retry-backoff-max``) and tries again, pumps on the
  unavailable list included, until ``write-timeout``. Then it raises
  :class:`NoPumpAvailable` naming every pump tried and its last error. A
  Prewrite that returned is durable on exactly the pump remembered for it.
- A **Commit** or **Rollback** goes to the pump that took the Prewrite of the
  same start_ts, retried there until ``write-timeout``. If it still fails the
  call returns normally: the upstream transaction is already decided, and
  that pump's lost-commit resolver settles the transaction after
  ``max_txn_timeout``. The loss is logged and counted in
  ``bridge_pump_client_commit_unsent_total``. A Commit whose Prewrite this
  client does not know (another process wrote it, or the route was evicted)
  is routed like a Prewrite.
- A DML **Prewrite larger than** ``chunk-bytes`` is written to one pump as
  PrewriteChunk parts and then the Prewrite (:mod:`bridge.pumpclient.chunked`).
  If that pump fails part-way, the transaction starts again from part 1 on the
  next pump, with the same rounds and pauses as a Prewrite; ``write-timeout``
  then bounds the time without progress (it starts again after each durable
  part), so a transaction of any size can finish. Its route is remembered once
  the final Prewrite is durable.
- A binlog the pump itself refuses (its errmsg, e.g. malformed) raises
  :class:`PumpRejected` and is not offered to other pumps.

A pump call that times out is ambiguous: the pump may have stored the
binlog. Retrying such a Prewrite elsewhere can leave a copy on the first
pump; its Commit goes to the pump remembered last.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from types import TracebackType

from bridge.errors import NoPumpAvailable, PumpUnavailable
from bridge.meta.client import MetaClient
from bridge.proto import binlog_pb2
from bridge.pumpclient import chunked, metrics
from bridge.pumpclient.busy import Activity
from bridge.pumpclient.config import PumpClientConfig
from bridge.pumpclient.discovery import RegistryWatcher, probe_forever
from bridge.pumpclient.node import PumpNode
from bridge.pumpclient.pool import PumpPool
from bridge.pumpclient.routes import PrewriteRoutes
from bridge.pumpclient.timestamps import TimestampBatcher
from bridge.retry import Backoff

log = logging.getLogger(__name__)

_PREWRITE = binlog_pb2.Prewrite
_SECOND_PHASE = frozenset({binlog_pb2.Commit, binlog_pb2.Rollback})
# The metrics label of each binlog type: "prewrite", "commit", ...
_KINDS = {value: name.lower() for name, value in binlog_pb2.BinlogType.items()}


def _report_unexpected_end(task: asyncio.Task[None]) -> None:
    """Background tasks run until cancelled; anything else is a bug worth a log line."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("pump client task %s stopped: %r", task.get_name(), exc, exc_info=exc)


class _Attempts:
    """Deadline, backoff and the last error of each pump tried, for one binlog."""

    def __init__(self, loop: asyncio.AbstractEventLoop, config: PumpClientConfig, deadline: float) -> None:
        self._loop = loop
        self._config = config
        self.deadline = deadline
        self._backoff: Backoff | None = None  # made on the first pause: most binlogs never pause
        self.errors: dict[str, str] = {}

    def remaining(self) -> float:
        return self.deadline - self._loop.time()

    def progressed(self) -> None:
        """A part of a chunked transaction is durable: the write-timeout starts again."""
        self.deadline = self._loop.time() + self._config.write_timeout

    def failed(self, node: PumpNode, exc: PumpUnavailable) -> None:
        self.errors[node.label] = str(exc)

    async def pause(self) -> bool:
        """Sleep before the next round; False when the deadline has passed."""
        remaining = self.remaining()
        if remaining <= 0:
            return False
        if self._backoff is None:
            self._backoff = Backoff(self._config.retry_backoff, self._config.retry_backoff_max)
        await self._backoff.sleep(limit=remaining)
        return self.remaining() > 0

    def summary(self) -> str:
        if not self.errors:
            return "no pump is online and alive in the registry"
        return "; ".join(f"{label}: {error}" for label, error in self.errors.items())


class AsyncPumpsClient:
    """Routes binlogs to pumps found in the meta service's registry.

    Use ``async with AsyncPumpsClient(meta_addrs, config) as client`` or call
    :meth:`start` and :meth:`close`. Safe for any number of concurrent
    :meth:`write_binlog` calls on the event loop that started it; their
    binlogs leave for each pump together in batched ``WriteBinlogs`` calls.
    """

    def __init__(self, meta_addrs: str | Sequence[str], config: PumpClientConfig | None = None) -> None:
        self.config = config if config is not None else PumpClientConfig()
        self.config.validate()
        self._meta_addrs = meta_addrs
        self._meta: MetaClient | None = None
        self._tso: TimestampBatcher | None = None
        self._pool: PumpPool | None = None
        self._routes = PrewriteRoutes(self.config.max_pending_txns)
        self._tasks: list[asyncio.Task[None]] = []
        self._activity = Activity()  # calls in progress: the batchers wait for more only while busy
        self.cluster_id = 0

    async def __aenter__(self) -> AsyncPumpsClient:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Ask the meta service for the cluster id and the pumps; start watching and probing.

        Raises MetaError (MetaUnavailable...) when the meta service cannot answer.
        """
        if self._pool is not None:
            raise RuntimeError("the pump client is already started")
        meta = MetaClient(
            self._meta_addrs,
            security=self.config.security,
            keepalive=self.config.keepalive,
            timeout=self.config.meta_timeout,
        )
        try:
            self.cluster_id = self.config.cluster_id or await meta.cluster_id()
            pool = PumpPool(self.config, self.cluster_id, self._activity)
            watcher = RegistryWatcher(meta, pool, self.config.discovery_wait)
            await watcher.load()
        except BaseException:
            await meta.close()
            raise
        self._meta, self._pool = meta, pool
        self._tso = TimestampBatcher(meta.get_timestamps, self.config.batch_linger, self._activity)
        self._tasks = [
            asyncio.create_task(watcher.run(), name="pump-registry-watch"),
            asyncio.create_task(probe_forever(pool, self.config.probe_interval), name="pump-probe"),
        ]
        for task in self._tasks:
            task.add_done_callback(_report_unexpected_end)
        log.info(
            "pump client started: cluster %d, strategy %s, available pumps: %s",
            self.cluster_id,
            self.config.strategy,
            ", ".join(self.available) or "none",
        )

    async def close(self) -> None:
        """Stop watching and probing, let queued binlogs leave, close every channel."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        tso, self._tso = self._tso, None
        if tso is not None:
            await tso.close()
        meta, self._meta = self._meta, None
        if meta is not None:
            await meta.close()

    @property
    def available(self) -> list[str]:
        """Node ids of the pumps that take Prewrites now."""
        pool = self._pool  # read once: other threads may call this while close() runs
        return [n.node_id for n in pool.available] if pool else []

    @property
    def unavailable(self) -> list[str]:
        """Node ids of the pumps being probed."""
        pool = self._pool
        return [n.node_id for n in pool.unavailable] if pool else []

    async def get_timestamps(self, count: int = 1) -> int:
        """Allocate ``count`` consecutive timestamps from the meta service's TSO; returns the first.

        Concurrent calls share one GetTimestamps call (see
        :mod:`bridge.pumpclient.timestamps`); each timestamp is still allocated
        after its caller asked.
        """
        if self._tso is None:
            raise RuntimeError("the pump client is not started (use start() or 'async with')")
        activity = self._activity
        activity.calls += 1
        try:
            return await self._tso.get(count)
        finally:
            activity.calls -= 1

    async def get_timestamp(self) -> int:
        """One fresh timestamp (a start_ts or commit_ts) from the meta service's TSO."""
        return await self.get_timestamps(1)

    async def write_binlog(self, binlog: binlog_pb2.Binlog) -> None:
        """Write one binlog; see the module docstring for routing and failures.

        Raises NoPumpAvailable (Prewrite only) and PumpRejected.
        """
        pool = self._pool
        if pool is None:
            raise RuntimeError("the pump client is not started (use start() or 'async with')")
        started = time.perf_counter()
        tp = binlog.tp
        kind = _KINDS[tp]
        activity = self._activity
        activity.calls += 1
        try:
            if tp in _SECOND_PHASE:
                await self._write_second_phase(pool, binlog.start_ts, binlog.SerializeToString(), kind)
            elif chunked.needs_chunks(binlog, self.config.chunk_bytes):
                await self._write_chunked(pool, binlog)
            else:
                await self._write_first_phase(pool, tp, binlog.start_ts, binlog.SerializeToString(), kind)
        finally:
            activity.calls -= 1
        metrics.write_seconds(kind).observe(time.perf_counter() - started)

    async def _write_first_phase(
        self, pool: PumpPool, tp: int, start_ts: int, payload: bytes, kind: str
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.write_timeout
        attempts: _Attempts | None = None  # made on the first failure: most binlogs never fail
        candidates = pool.prewrite_candidates(start_ts)
        while True:
            for node in candidates:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await node.write(payload, kind, remaining)
                except PumpUnavailable as exc:
                    attempts = attempts or _Attempts(loop, self.config, deadline)
                    attempts.failed(node, exc)
                    continue
                if tp == _PREWRITE:
                    self._routes.remember(start_ts, node.node_id)
                return
            attempts = attempts or _Attempts(loop, self.config, deadline)
            if not await attempts.pause():
                raise NoPumpAvailable(
                    f"no pump took the {kind} binlog of start_ts {start_ts} within "
                    f"write-timeout {self.config.write_timeout:g}s: {attempts.summary()}"
                )
            candidates = pool.prewrite_candidates(start_ts)

    async def _write_chunked(self, pool: PumpPool, binlog: binlog_pb2.Binlog) -> None:
        """A large Prewrite in parts to one pump; on a failure, from part 1 on the next (see the module)."""
        start_ts = binlog.start_ts
        value = await asyncio.to_thread(chunked.parse_value, binlog)
        loop = asyncio.get_running_loop()
        attempts = _Attempts(loop, self.config, loop.time() + self.config.write_timeout)
        candidates = pool.prewrite_candidates(start_ts)
        started = False
        while True:
            for node in candidates:
                if attempts.remaining() <= 0:
                    break
                if started:
                    metrics.CHUNKED_RESTARTS.inc()
                    log.info(
                        "writing the chunked Prewrite of start_ts %d again on pump %s", start_ts, node.label
                    )
                started = True
                try:
                    await chunked.write_chunked(
                        node,
                        binlog,
                        value,
                        self.config.chunk_bytes,
                        self.config.max_inflight_batches,
                        attempts.remaining,
                        attempts.progressed,
                    )
                except PumpUnavailable as exc:
                    attempts.failed(node, exc)
                    continue
                self._routes.remember(start_ts, node.node_id)
                metrics.CHUNKED_TXNS.inc()
                return
            if not await attempts.pause():
                raise NoPumpAvailable(
                    f"no pump took the chunked prewrite binlog of start_ts {start_ts} within "
                    f"write-timeout {self.config.write_timeout:g}s: {attempts.summary()}"
                )
            candidates = pool.prewrite_candidates(start_ts)

    async def _write_second_phase(self, pool: PumpPool, start_ts: int, payload: bytes, kind: str) -> None:
        node_id = self._routes.take(start_ts)
        if node_id is None:
            log.debug(
                "no known Prewrite pump for the %s of start_ts %d; routing it by strategy", kind, start_ts
            )
            candidates = pool.prewrite_candidates(start_ts)
            node_id = candidates[0].node_id if candidates else ""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.write_timeout
        attempts: _Attempts | None = None  # made on the first failure: most binlogs never fail
        while True:
            node = pool.get(node_id)
            remaining = deadline - loop.time()
            if node is not None and remaining > 0:
                try:
                    await node.write(payload, kind, remaining)
                    return
                except PumpUnavailable as exc:
                    attempts = attempts or _Attempts(loop, self.config, deadline)
                    attempts.failed(node, exc)
            attempts = attempts or _Attempts(loop, self.config, deadline)
            if node is None:
                attempts.errors[node_id or "(none)"] = "not in the pump registry"
            if not await attempts.pause():
                break
        metrics.COMMIT_UNSENT.inc()
        log.warning(
            "the %s binlog of start_ts %d did not reach pump %s within write-timeout %gs (%s); "
            "that pump's lost-commit resolver will settle the transaction",
            kind,
            start_ts,
            node_id or "(none)",
            self.config.write_timeout,
            attempts.summary(),
        )

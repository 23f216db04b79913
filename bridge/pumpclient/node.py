"""One pump as the client sees it: its channel, its health, and the batcher
that coalesces concurrent callers' binlogs into ``WriteBinlogs`` calls.

Batching: a caller's binlog joins the pump's queue; while fewer than
``max-inflight-batches`` calls are in flight a sender takes up to
``batch-max`` binlogs (and ``batch-max-bytes``) from the queue and sends them
in one call. Binlogs that arrive while calls are in flight wait and leave
together in the next call, so batches grow with the load and a lone binlog
leaves at once. While other calls of the client are in progress, a sender
first waits for more, up to ``batch-linger`` (:mod:`bridge.pumpclient.busy`),
and no other sender starts meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from bridge.binlog import COMMIT_REFUSED_PREFIX, PUMP_UNAVAILABLE_PREFIX
from bridge.errors import BinlogTooLarge, CommitRefused, PumpRejected, PumpUnavailable
from bridge.grpcutil import aio_channel
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc
from bridge.pumpclient import metrics
from bridge.pumpclient.busy import Activity
from bridge.pumpclient.config import PumpClientConfig

log = logging.getLogger(__name__)

# start_ts = commit_ts = 0: the pump answers without storing anything.
PROBE_PAYLOAD = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=0, commit_ts=0).SerializeToString()

# Codes that mean the pump process is not there (refused, reset, shutting
# down): no point waiting for max-errors failures.
_GONE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})

# gRPC's size refusal: "... larger than max (134217800 vs. 134217728)".
_SIZES = re.compile(r"\((\d+) vs\. (\d+)\)")

# Allowance for event loop lag on top of the pump calls' own deadlines.
_WAIT_SLACK = 1.0


@dataclass(eq=False, slots=True)
class PendingBinlog:
    payload: bytes
    kind: str  # the binlog type, lower case: the metrics label
    future: asyncio.Future[str]  # the pump's errmsg for this binlog; "" = durable


FailureHook = Callable[["PumpNode", bool], None]


def describe_rpc_error(exc: Any) -> str:
    """``UNAVAILABLE: failed to connect ...`` from a grpc.aio.AioRpcError."""
    details = (exc.details() or "").strip()
    return f"{exc.code().name}: {details}" if details else str(exc.code().name)


def _expire(future: asyncio.Future[str], timeout: float, node: PumpNode) -> None:
    if not future.done():
        last = f" (last error: {node.last_error})" if node.last_error else ""
        future.set_exception(PumpUnavailable(f"no answer within {timeout:.1f}s{last}"))


class PumpNode:
    """A pump's address, health counters and write batcher.

    ``on_failure(node, gone)`` is called once per failed call to the pump,
    after ``consecutive_errors`` and ``last_error`` are updated; ``gone`` says
    the pump process did not answer at all (connection refused or reset).
    """

    def __init__(
        self,
        node_id: str,
        addr: str,
        config: PumpClientConfig,
        cluster_id: int,
        on_failure: FailureHook,
        activity: Activity | None = None,
    ) -> None:
        self.node_id = node_id
        self.addr = addr
        self.score = 0
        self.candidate = False  # ONLINE and alive in the registry
        self.failed = False  # in the unavailable list until a probe answers
        self.consecutive_errors = 0
        self.last_error = ""
        self._config = config
        self._cluster_id = cluster_id
        self._on_failure = on_failure
        self._channel = aio_channel(addr, config.security, keepalive=config.keepalive)
        self._stub = pump_pb2_grpc.PumpStub(self._channel)  # type: ignore[no-untyped-call]
        self._loop = asyncio.get_running_loop()
        self._queue: deque[PendingBinlog] = deque()
        self._queued_bytes = 0
        self._senders = 0
        self._activity = activity if activity is not None else Activity()
        self._lingering = False  # a sender waits for more: the others wait for it
        self._sending = 0  # binlogs in calls in flight
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def gathering(self) -> bool:
        """A batch is waiting for more binlogs before it leaves (see :meth:`_linger`)."""
        return self._lingering and bool(self._queue)

    @property
    def label(self) -> str:
        return f"{self.node_id} ({self.addr})"

    async def write(self, payload: bytes, kind: str, timeout: float) -> None:
        """Send one binlog in the next batch and wait for its result.

        Raises PumpUnavailable when the call fails or no answer comes within
        ``timeout`` or its state refuses writes for now (paused, closing...),
        PumpRejected when the pump refused this binlog itself (CommitRefused
        for a Commit the pump would not deliver).
        """
        future: asyncio.Future[str] = self._loop.create_future()
        self._queue.append(PendingBinlog(payload, kind, future))
        self._queued_bytes += len(payload)
        if self._senders < self._config.max_inflight_batches and not self._lingering:
            self._senders += 1
            task = self._loop.create_task(self._send_queued(), name=f"pump-batcher-{self.node_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if timeout >= self._worst_wait():
            errmsg = await future  # the batching answers in time: spare a timer per binlog
        else:
            # One timer handle, not asyncio.timeout(): this runs per binlog. An
            # expired binlog still queued is skipped by _take_batch.
            timer = self._loop.call_later(timeout, _expire, future, timeout, self)
            try:
                errmsg = await future
            finally:
                timer.cancel()
        if errmsg.startswith(PUMP_UNAVAILABLE_PREFIX):  # the pump's state, not the binlog
            raise PumpUnavailable(f"pump {self.label} cannot take the {kind} binlog now: {errmsg}")
        if errmsg.startswith(COMMIT_REFUSED_PREFIX):  # final: no other pump holds the Prewrite
            raise CommitRefused(f"pump {self.label} refused the {kind} binlog: {errmsg}")
        if errmsg:
            raise PumpRejected(f"pump {self.label} rejected the {kind} binlog: {errmsg}")

    def _worst_wait(self) -> float:
        """How long the last queued binlog can wait for its result at most.

        Every call ends (answer, error or deadline) within rpc-timeout, and the
        binlogs queued ahead leave in at most ``calls_ahead`` calls, with
        ``max-inflight-batches`` calls at a time.
        """
        config = self._config
        calls_ahead = -(-len(self._queue) // config.batch_max) + -(
            -self._queued_bytes // config.batch_max_bytes
        )
        rounds = calls_ahead // config.max_inflight_batches + 2
        return rounds * config.rpc_timeout + _WAIT_SLACK

    async def probe(self, timeout: float) -> bool:
        """Send the empty binlog; True when the pump answered without error."""
        request = pump_pb2.WriteBinlogReq(clusterID=self._cluster_id, payload=PROBE_PAYLOAD)
        try:
            response = await self._stub.WriteBinlog(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            self.last_error = describe_rpc_error(exc)
            return False
        if response.errmsg:
            self.last_error = f"probe refused: {response.errmsg}"
            return False
        self.consecutive_errors = 0
        return True

    async def close(self, grace: float) -> None:
        """Let queued binlogs leave (up to one rpc-timeout each), then close the channel."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        await self._channel.close(grace=None)

    async def _send_queued(self) -> None:
        try:
            while self._queue:
                wait = self._linger()
                if wait:
                    self._lingering = True
                    try:
                        await asyncio.sleep(wait)
                    finally:
                        self._lingering = False
                batch = self._take_batch()
                if batch:
                    await self._send_batch(batch)
        finally:
            self._senders -= 1

    def _linger(self) -> float:
        """How long the next batch waits for more (0: it leaves now): while other calls of the
        client are in progress (not only the binlogs queued or in flight here) and the queue holds
        less than a full batch, the longer the more calls (:mod:`bridge.pumpclient.busy`)."""
        queued = len(self._queue)
        if queued >= self._config.batch_max:
            return 0.0
        return self._activity.linger(queued + self._sending, self._config.batch_linger)

    def _take_batch(self) -> list[PendingBinlog]:
        batch: list[PendingBinlog] = []
        size = 0
        while self._queue and len(batch) < self._config.batch_max:
            item = self._queue[0]
            if batch and size + len(item.payload) > self._config.batch_max_bytes:
                break
            self._queue.popleft()
            self._queued_bytes -= len(item.payload)
            if item.future.done():  # the caller gave up waiting; do not send it
                continue
            batch.append(item)
            size += len(item.payload)
        return batch

    async def _send_batch(self, batch: list[PendingBinlog]) -> None:
        request = pump_pb2.WriteBinlogsReq(clusterID=self._cluster_id, payloads=[b.payload for b in batch])
        metrics.BATCH_SIZE.observe(len(batch))
        self._sending += len(batch)
        try:
            response = await self._stub.WriteBinlogs(request, timeout=self._config.rpc_timeout)
        except grpc.aio.AioRpcError as exc:
            self._sending -= len(batch)
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and _SIZES.search(exc.details() or ""):
                await self._too_large(batch, exc)
            else:
                self._fail(batch, describe_rpc_error(exc), gone=exc.code() in _GONE_CODES)
            return
        except BaseException:
            self._sending -= len(batch)
            raise
        self._sending -= len(batch)
        if response.errmsg:
            self._fail(batch, f"refused the batch: {response.errmsg}", gone=False)
            return
        if len(response.errmsgs) != len(batch):
            self._fail(
                batch, f"answered {len(response.errmsgs)} results for {len(batch)} binlogs", gone=False
            )
            return
        self.consecutive_errors = 0
        errmsgs = response.errmsgs
        tally: Tally[tuple[str, str]] = Tally()
        if any(errmsgs):
            for item, errmsg in zip(batch, errmsgs, strict=True):
                tally[item.kind, "rejected" if errmsg else "ok"] += 1
        else:  # the common case: count by kind in one C pass, not a tally step per binlog
            for kind, count in Tally([item.kind for item in batch]).items():
                tally[kind, "ok"] = count
        for item, errmsg in zip(batch, errmsgs, strict=True):
            if not item.future.done():
                item.future.set_result(errmsg)
        self._count(tally)

    async def _too_large(self, batch: list[PendingBinlog], exc: grpc.aio.AioRpcError) -> None:
        """A call over the message size limit: the pump is fine, so it is not marked failed.
        A batch is sent again one binlog a call; a lone binlog fails with BinlogTooLarge."""
        if len(batch) > 1:
            for item in batch:
                await self._send_batch([item])
            return
        (item,) = batch
        sizes = _SIZES.search(exc.details() or "")
        limit = f" of {sizes.group(2)} bytes" if sizes else ""  # found: the caller checked
        message = (
            f"the {item.kind} binlog of {len(item.payload)} bytes is over the message size limit{limit} "
            f"of pump {self.label} or this client (max-message-size): {describe_rpc_error(exc)}"
        )
        metrics.writes(self.node_id, item.kind, "rejected").inc()
        if not item.future.done():
            item.future.set_exception(BinlogTooLarge(message))

    def _fail(self, batch: list[PendingBinlog], reason: str, gone: bool) -> None:
        self.consecutive_errors += 1
        self.last_error = reason
        log.debug("pump %s: a batch of %d binlogs failed: %s", self.label, len(batch), reason)
        tally: Tally[tuple[str, str]] = Tally()
        for item in batch:
            tally[item.kind, "failed"] += 1
            if not item.future.done():
                item.future.set_exception(PumpUnavailable(reason))
        self._count(tally)
        self._on_failure(self, gone)

    def _count(self, tally: Tally[tuple[str, str]]) -> None:
        for (kind, result), n in tally.items():
            metrics.writes(self.node_id, kind, result).inc(n)

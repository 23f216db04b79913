"""The Pump gRPC service: producers write binlogs, drainers pull committed transactions.

Writes (``WriteBinlog``, ``WriteBinlogs``):

- The request's ``clusterID`` must be this cluster's, else the whole call is
  answered with ``errmsg`` and nothing is looked at.
- Each payload is parsed and checked (:func:`pump.checks.read_write_payload`:
  :func:`bridge.binlog.parse_binlog`, deep: ``prewrite_value`` and
  ``ddl_schema_change`` too, with a fast path for the usual shapes). A payload that
  fails gets its own errmsg naming the fault; the others of the call are
  stored. Only Prewrite, Commit, Rollback and PrewriteChunk (the parts of a
  chunked transaction, admitted like Prewrites) binlogs are stored; a fake
  binlog (a Rollback with ``commit_ts = start_ts``) is refused: only the pump
  writes those.
- A probe (``start_ts = commit_ts = 0``) is not stored; it is answered with
  the pump's refusal of Prewrites ("" when it takes them), so a client
  returns a pump to rotation only when it takes writes again.
- ``WriteBinlog`` (one binlog) ends with ``INVALID_ARGUMENT`` naming the fault
  when its payload fails those checks (e.g. a Commit with ``commit_ts <=
  start_ts``), and with ``OUT_OF_RANGE`` when its timestamps are beyond the
  TSO's (:mod:`pump.guard`), and with ``FAILED_PRECONDITION`` when it is a
  Commit the pump would not deliver (:mod:`pump.storage.late_commits`); in
  ``WriteBinlogs`` each is the binlog's errmsg.
- Every stored binlog is admitted by the node (:meth:`pump.node.PumpNode.write_refusal`,
  then :meth:`~pump.node.PumpNode.enter_writes` for the call's admitted ones):
  a refused one gets the refusal as its errmsg. An empty errmsg means the
  binlog is durable.
- When the storage fails to write what was admitted (closing, a failed
  fsync), the call ends with ``UNAVAILABLE``: it is not the binlog's fault,
  and the client retries. After a failed fsync the storage refuses every
  write until the pump restarts, and probes are answered with that error.

A request body that does not parse as the method's request message ends the
call with ``INVALID_ARGUMENT`` naming the fault (and no traceback in the log).

Pulls (``PullBinlogs``): a wrong ``clusterID`` ends the call with
``FAILED_PRECONDITION``. ``startFrom.offset`` is the last commit_ts the
drainer already has (``suffix`` is ignored); the stream then carries, in
commit_ts order and following new data until the call ends:

- each committed transaction once, as an Entity whose ``payload`` is the
  Prewrite binlog as the producer sent it re-typed as the Commit (``tp =
  Commit``, ``commit_ts`` set; the original pump's pulled form, which
  :func:`bridge.binlog.parse_binlog` accepts), ``meta = {startTs, commitTs}``
  and ``pos.offset = commit_ts``;
- a chunked transaction as its parts first: each PrewriteChunk as the
  producer sent it with ``commit_ts`` set (``tp`` stays PrewriteChunk), in
  chunk order, with the same ``meta`` and ``pos.offset`` as the transaction,
  then its Prewrite re-typed as above (it carries ``chunks``, their number);
  a stream message may end between them;
- watermarks, as Entities carrying a fake binlog (a Rollback with ``start_ts
  = commit_ts = ts``, the original's form), ``meta = {ts, ts}`` and
  ``pos.offset = ts``: no committed transaction at or below ``ts`` is still
  to come from this pump. A watermark never goes down.

``checksum`` is the CRC32C (Castagnoli) of ``payload``, 4 bytes big-endian.
Entities travel in the repeated ``entities`` field, several per stream
message (up to the max message size); the single ``entity`` field is never
set by this pump. :func:`pump.wire.response_entities` reads either form.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import grpc

from bridge.binlog import COMMIT_REFUSED_PREFIX, PUMP_UNAVAILABLE_PREFIX, BinlogType, is_probe
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2, pump_pb2
from pump import metrics
from pump.checks import read_write_payload
from pump.guard import REFUSAL_PREFIX, TimestampGuard
from pump.storage import ChunkPart, CommittedTxn, PullItem, StorageError, StorageFailed
from pump.wire import BadRequest, lenient_parser, pack_responses, txn_entity, watermark_entity

log = logging.getLogger(__name__)

# Plain ints: the enum wrapper's attribute lookup costs more than a parse here.
_PREWRITE, _COMMIT, _ROLLBACK = BinlogType.Prewrite, BinlogType.Commit, BinlogType.Rollback
_CHUNK = BinlogType.PrewriteChunk
# Binlog types a pump stores -> the metrics label.
_KINDS = {_PREWRITE: "prewrite", _COMMIT: "commit", _ROLLBACK: "rollback", _CHUNK: "chunk"}
_MESSAGE_SLACK = 64 * 1024
PULL_MAX_ENTRIES = 1024
PULL_MAX_BYTES = 4 << 20


class WriteAdmission(Protocol):
    """What the service asks the node about writes (:class:`pump.node.PumpNode`).

    The service asks :meth:`write_refusal` for each binlog and enters the
    admitted ones with :meth:`enter_writes` before it awaits anything (so no
    state change comes between), counted per kind; :meth:`exit_writes` once
    the call's write is acknowledged or failed.
    """

    def write_refusal(self, prewrite: bool) -> str: ...

    def enter_writes(self, prewrites: int, others: int) -> None: ...

    def exit_writes(self, prewrites: int, others: int) -> None: ...


class BinlogStore(Protocol):
    """The storage calls the service makes (:class:`pump.storage.Storage`)."""

    async def write(self, binlogs: Sequence[tuple[binlog_pb2.Binlog, bytes]]) -> None: ...

    def pull(
        self, after_commit_ts: int, *, max_entries: int = ..., max_bytes: int = ..., interval: float = ...
    ) -> AsyncIterator[list[PullItem]]: ...


def add_to_server(service: PumpService, server: grpc.aio.Server) -> None:
    """Register ``service`` as ``binlog.Pump``; malformed request bodies end
    their call with INVALID_ARGUMENT naming the fault."""
    handlers = {
        "WriteBinlog": grpc.unary_unary_rpc_method_handler(
            service.WriteBinlog,
            request_deserializer=lenient_parser(pump_pb2.WriteBinlogReq),
            response_serializer=pump_pb2.WriteBinlogResp.SerializeToString,
        ),
        "WriteBinlogs": grpc.unary_unary_rpc_method_handler(
            service.WriteBinlogs,
            request_deserializer=lenient_parser(pump_pb2.WriteBinlogsReq),
            response_serializer=pump_pb2.WriteBinlogsResp.SerializeToString,
        ),
        "PullBinlogs": grpc.unary_stream_rpc_method_handler(
            service.PullBinlogs,
            request_deserializer=lenient_parser(pump_pb2.PullBinlogReq),
            response_serializer=pump_pb2.PullBinlogResp.SerializeToString,
        ),
    }
    service_name = pump_pb2.DESCRIPTOR.services_by_name["Pump"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service_name, handlers),))


async def refuse_bad_request(request: object, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """End the call with INVALID_ARGUMENT when the body was not the request message."""
    if isinstance(request, BadRequest):
        metrics.ERRORS.labels("bad_request").inc()
        log.debug("refused a malformed request from %s: %s", context.peer(), request.message)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)


class _Accepted:
    """The binlogs of one call admitted for storing, and their positions in the call."""

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.binlogs: list[tuple[binlog_pb2.Binlog, bytes]] = []
        self.prewrites = 0  # entered into the admission, by kind
        self.others = 0
        self.error: StorageError | None = None  # the storage failed to write them


class PumpService:
    """The Pump servicer; see the module docstring for the contract. Register
    it with :func:`add_to_server`."""

    def __init__(
        self,
        cluster_id: int,
        admission: WriteAdmission,
        storage: BinlogStore,
        *,
        max_message_bytes: int,
        guard: TimestampGuard | None = None,
        pull_interval: float = 0.0,
    ) -> None:
        self._cluster_id = cluster_id
        self._pull_interval = pull_interval
        self._guard = guard
        self._admission = admission
        self._storage = storage
        self._message_limit = max(max_message_bytes - _MESSAGE_SLACK, 1)
        self._stopping = asyncio.Event()
        self.storage_failure = ""  # set once the storage refuses every write

    def _cluster_problem(self, cluster_id: int) -> str:
        if cluster_id == self._cluster_id:
            return ""
        return (
            f"cluster id mismatch: this pump belongs to cluster {self._cluster_id}, "
            f"the request names {cluster_id}"
        )

    # --- writes ----------------------------------------------------------

    async def WriteBinlog(
        self, request: pump_pb2.WriteBinlogReq, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pump_pb2.WriteBinlogResp:
        await refuse_bad_request(request, context)
        _WRITE_CALLS.inc()
        problem = self._cluster_problem(request.clusterID)
        if problem:
            metrics.WRITES.labels("unknown", "refused").inc()
            return pump_pb2.WriteBinlogResp(errmsg=problem)
        try:
            read_write_payload(request.payload)  # parsed twice: WriteBinlog is not the batched path
        except ProtocolError as exc:
            metrics.WRITES.labels("unknown", "invalid").inc()
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        (errmsg,) = await self._write_or_abort([request.payload], context)
        if errmsg.startswith(REFUSAL_PREFIX):
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, errmsg)
        if errmsg.startswith(COMMIT_REFUSED_PREFIX):  # a Commit this pump would not deliver
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, errmsg)
        return pump_pb2.WriteBinlogResp(errmsg=errmsg)

    async def WriteBinlogs(
        self, request: pump_pb2.WriteBinlogsReq, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pump_pb2.WriteBinlogsResp:
        await refuse_bad_request(request, context)
        _WRITE_CALLS.inc()
        problem = self._cluster_problem(request.clusterID)
        if problem:
            metrics.WRITES.labels("unknown", "refused").inc(len(request.payloads))
            return pump_pb2.WriteBinlogsResp(errmsg=problem)
        return pump_pb2.WriteBinlogsResp(errmsgs=await self._write_or_abort(request.payloads, context))

    async def _write_or_abort(
        self, payloads: Sequence[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> list[str]:
        try:
            return await self.write_payloads(payloads)
        except StorageError as exc:
            # Not the binlog's fault: UNAVAILABLE makes the client retry (elsewhere, for a Prewrite).
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"pump storage failed: {exc}")
            raise  # abort raises; this keeps the type checker informed

    async def write_payloads(self, payloads: Sequence[bytes]) -> list[str]:
        """Check, admit and store ``payloads``; one errmsg per payload ("" = durable).

        Raises :class:`StorageError` when the storage failed to write what was
        admitted: none of the call is known durable, the caller retries.
        """
        started = time.perf_counter()
        errmsgs = [""] * len(payloads)
        tally: Counter[tuple[str, str]] = Counter()
        accepted = await self._admit(payloads, errmsgs, tally)
        if accepted.binlogs:
            write = asyncio.ensure_future(self._store(accepted, errmsgs))
            # If this call is cancelled the write still goes on; admission ends with it.
            write.add_done_callback(lambda task: self._finish(task, accepted))
            results = await asyncio.shield(write)
            elapsed = time.perf_counter() - started
            if accepted.error is None and "invalid" not in results:  # all stored: count by type in C
                for tp, count in Counter([binlog.tp for binlog, _ in accepted.binlogs]).items():
                    tally[_KINDS[tp], "ok"] += count
            else:
                for (binlog, _), result in zip(accepted.binlogs, results, strict=True):
                    tally[_KINDS[binlog.tp], result] += 1
            # Once per call and type, not per binlog: every binlog of a call
            # waits the same time, and an observation per binlog cost ~7 % CPU.
            for kind in {kind for (kind, result) in tally if result == "ok"}:
                _WRITE_SECONDS[kind].observe(elapsed)
        for (kind, result), count in tally.items():
            metrics.WRITES.labels(kind, result).inc(count)
        if accepted.error is not None:
            raise accepted.error
        return errmsgs

    def _probe_refusal(self) -> str:
        """What a probe is told: "" when this pump takes Prewrites now."""
        if self.storage_failure:
            return f"{PUMP_UNAVAILABLE_PREFIX}{self.storage_failure}"
        return self._admission.write_refusal(True)

    async def _admit(
        self, payloads: Sequence[bytes], errmsgs: list[str], tally: Counter[tuple[str, str]]
    ) -> _Accepted:
        accepted = _Accepted()
        guard = self._guard
        bound = guard.bound() if guard is not None else 0  # grows with time: an older one is stricter
        refusals: dict[bool, str] = {}  # the admission's answer per kind, until the next await
        entering = [0, 0]  # admitted, not yet entered: others, Prewrites
        for position, payload in enumerate(payloads):
            try:
                binlog = read_write_payload(payload)
            except ProtocolError as exc:
                errmsgs[position] = str(exc)
                tally["unknown", "invalid"] += 1
                continue
            if is_probe(binlog):
                errmsgs[position] = self._probe_refusal()
                continue
            if guard is not None and not guard.within(binlog, bound):
                self._enter(accepted, entering)  # before awaiting: a pause may begin meanwhile
                refusals.clear()
                out_of_bounds = await guard.refusal(binlog)
                bound = guard.bound()
                if out_of_bounds:
                    errmsgs[position] = out_of_bounds
                    tally[_KINDS[binlog.tp], "refused"] += 1
                    continue
            prewrite = binlog.tp == _PREWRITE or binlog.tp == _CHUNK  # a part starts a transaction too
            refusal = refusals.get(prewrite)
            if refusal is None:
                refusal = refusals[prewrite] = self._admission.write_refusal(prewrite)
            if refusal:
                errmsgs[position] = refusal
                tally[_KINDS[binlog.tp], "refused"] += 1
                continue
            entering[prewrite] += 1
            accepted.positions.append(position)
            accepted.binlogs.append((binlog, payload))
        self._enter(accepted, entering)
        return accepted

    def _enter(self, accepted: _Accepted, entering: list[int]) -> None:
        others, prewrites = entering
        if others or prewrites:
            self._admission.enter_writes(prewrites, others)
            accepted.prewrites += prewrites
            accepted.others += others
            entering[:] = [0, 0]

    async def _store(self, accepted: _Accepted, errmsgs: list[str]) -> list[str]:
        """Store the admitted binlogs; returns each one's result (ok, invalid, error)
        and writes the errmsg of each that failed."""
        try:
            await self._storage.write(accepted.binlogs)
        except ProtocolError:
            # The storage checks the whole call before writing any of it; find the culprit.
            return await self._store_each(accepted, errmsgs)
        except StorageError as exc:
            self._storage_failed(exc)
            accepted.error = exc
            return ["error"] * len(accepted.positions)
        return ["ok"] * len(accepted.positions)

    async def _store_each(self, accepted: _Accepted, errmsgs: list[str]) -> list[str]:
        outcomes = await asyncio.gather(
            *(self._storage.write([binlog]) for binlog in accepted.binlogs), return_exceptions=True
        )
        results: list[str] = []
        for position, outcome in zip(accepted.positions, outcomes, strict=True):
            if isinstance(outcome, ProtocolError):
                errmsgs[position], result = str(outcome), "invalid"
            elif isinstance(outcome, StorageError):
                self._storage_failed(outcome)
                accepted.error, result = outcome, "error"
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                result = "ok"
            results.append(result)
        return results

    def _storage_failed(self, exc: StorageError) -> None:
        metrics.ERRORS.labels("storage").inc()
        if isinstance(exc, StorageFailed):  # for good: probes say so until the pump restarts
            self.storage_failure = f"pump storage failed: {exc}"
        log.error("writing binlogs failed: %s", exc)

    def _finish(self, write: asyncio.Future[list[str]], accepted: _Accepted) -> None:
        self._admission.exit_writes(accepted.prewrites, accepted.others)
        if not write.cancelled() and write.exception() is not None:
            metrics.ERRORS.labels("storage").inc()

    # --- pulls -----------------------------------------------------------

    async def PullBinlogs(
        self, request: pump_pb2.PullBinlogReq, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pump_pb2.PullBinlogResp]:
        await refuse_bad_request(request, context)
        problem = self._cluster_problem(request.clusterID)
        if problem:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, problem)
        after = request.startFrom.offset
        if after < 0:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"startFrom.offset must be >= 0, got {after}"
            )
        metrics.PULL_STREAMS.inc()
        log.info("pull from commit_ts %d by %s", after, context.peer())
        try:
            async for items in self._batches(after):
                for response in pack_responses(self._entities(items), self._message_limit):
                    _PULL_MESSAGES.inc()
                    yield response
        except StorageError as exc:
            metrics.ERRORS.labels("storage").inc()
            log.error("pull from commit_ts %d failed: %s", after, exc)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"pump storage failed: {exc}")
        finally:
            metrics.PULL_STREAMS.dec()
        # Ended by the pump, not the drainer: say so, so the drainer reconnects.
        await context.abort(grpc.StatusCode.UNAVAILABLE, "the pump is stopping")

    async def _batches(self, after: int) -> AsyncIterator[list[PullItem]]:
        """The storage's pull batches until it ends or :meth:`end_pulls` is called."""
        source = self._storage.pull(
            after, max_entries=PULL_MAX_ENTRIES, max_bytes=PULL_MAX_BYTES, interval=self._pull_interval
        )
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            while True:
                step = asyncio.ensure_future(anext(source, None))
                await asyncio.wait((step, stopping), return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    step.cancel()
                    await asyncio.gather(step, return_exceptions=True)
                    return
                items = step.result()
                if items is None:
                    return
                yield items
        finally:
            stopping.cancel()

    @staticmethod
    def _entities(items: Sequence[PullItem]) -> list[pump_pb2.Entity]:
        entities: list[pump_pb2.Entity] = []
        txns = parts = 0
        for item in items:
            if isinstance(item, CommittedTxn):
                entities.append(txn_entity(item))
                txns += 1
            elif isinstance(item, ChunkPart):
                entities.append(txn_entity(item))
                parts += 1
            else:
                entities.append(watermark_entity(item.ts))
        _PULLED_BINLOGS.inc(txns)
        if parts:
            _PULLED_CHUNKS.inc(parts)
        _PULLED_WATERMARKS.inc(len(entities) - txns - parts)
        return entities

    def end_pulls(self) -> None:
        """End every open pull stream with UNAVAILABLE (the server is stopping)."""
        self._stopping.set()


_WRITE_CALLS = metrics.WRITE_CALLS
_PULL_MESSAGES = metrics.PULL_MESSAGES
_WRITE_SECONDS = {kind: metrics.WRITE_SECONDS.labels(kind) for kind in _KINDS.values()}
_PULLED_BINLOGS = metrics.PULL_ENTITIES.labels("binlog")
_PULLED_WATERMARKS = metrics.PULL_ENTITIES.labels("watermark")
_PULLED_CHUNKS = metrics.PULL_ENTITIES.labels("chunk")

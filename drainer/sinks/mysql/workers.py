"""A worker of the MySQL sink: one thread, one connection, one downstream transaction at a time.

The sink's dispatcher hands a worker lists of :class:`~drainer.sinks.mysql_batch.Unit`
(its share of the row changes, in binlog order, already grouped and written as
statement text by :func:`~drainer.sinks.mysql_batch.units`) and :class:`Barrier`
jobs. The worker runs the units' statements inside one
downstream transaction, commits every ``txn-rows`` row changes, and on a
``commit`` barrier commits what it holds; a ``rollback`` barrier drops what
is uncommitted (after a failure somewhere).

With each commit the worker writes its progress row in the same transaction
(``<progress-schema>.sink_progress``, keyed by cluster id and worker number):
the highest commit_ts it applied and, on the keyless worker, the number of
that transaction's keyless changes applied. After a restart the sink reads
these rows to skip keyless changes already applied and to stay in safe mode
until it has passed every commit_ts a worker may have committed.

A deadlock, a lock wait timeout or a lost connection while applying (not
while committing: then the outcome is unknown) makes the worker roll back and
apply every change since its last commit again, up to ``LOCAL_RETRIES``
times with a short backoff; the ops since the last commit are kept for that.
A read or write that reached its timeout is not applied again here: each try
would wait the whole timeout once more (a blackholed link: the first report
came after six of them), so it is reported at once and the sink's own retry
takes over; the error names the timeout that applied.
Otherwise the first error a worker meets is kept (translated by
:func:`~drainer.sinks.mysql_conn.translate_error`); the worker rolls back,
drops a broken connection, discards further ops and reports the error at the
next barrier. It connects lazily, with a capped backoff between attempts.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import pymysql

from bridge.mysql import timed_out
from bridge.retry import Backoff
from bridge.sink.errors import SinkApplyError, SinkError
from drainer.sinks.mysql.batch import STATEMENT_BYTES, Batch, Unit, units
from drainer.sinks.mysql.connection import ConnectSettings, close_quietly, timeout_error, translate_error
from drainer.sinks.mysql.metrics import WorkerMetrics

log = logging.getLogger(__name__)

Job = list[Unit] | Callable[[], list[Unit]]
LOCAL_RETRIES = 5  # a worker applies its open transaction again this often before giving up
DB_ERRORS = (pymysql.err.MySQLError, OSError)


class Barrier:
    """Every worker commits (or rolls back) what it holds; :meth:`wait` returns their errors."""

    def __init__(self, action: str, parties: int) -> None:
        self.action = action
        self._left = parties
        self._cond = threading.Condition()
        self.errors: list[SinkError] = []

    def done(self, error: SinkError | None) -> None:
        with self._cond:
            if error is not None:
                self.errors.append(error)
            self._left -= 1
            if self._left <= 0:
                self._cond.notify_all()

    def wait(self) -> list[SinkError]:
        with self._cond:
            while self._left > 0:
                self._cond.wait()
        return self.errors


class Worker(threading.Thread):
    """See the module docstring. ``number`` is the progress row's worker column."""

    def __init__(
        self,
        number: int,
        settings: ConnectSettings,
        *,
        batch_rows: int,
        txn_rows: int,
        progress_sql: str,
        cluster_id: int,
        retry_max: float,
        stop: threading.Event,
        metrics: WorkerMetrics,
        queue_size: int = 8,
    ) -> None:
        super().__init__(name=f"mysql-sink-worker-{number}", daemon=True)
        self.number = number
        self.settings = settings
        self.batch_rows = batch_rows
        self.txn_rows = txn_rows
        self.progress_sql = progress_sql
        self.cluster_id = cluster_id
        self.metrics = metrics
        self.jobs: queue.Queue[Job | Barrier | None] = queue.Queue(maxsize=queue_size)
        self.error: SinkError | None = None
        self.conn: Any = None
        self.connection_id = 0
        self._backoff = Backoff(initial=min(0.1, retry_max), cap=retry_max)  # between reconnects
        self._stop_event = stop
        self._held: list[Unit] = []  # units applied (or being applied) since the last commit
        self._pending = 0  # row changes in them
        self._high_ts = 0  # highest commit_ts applied in the open transaction
        self._seq = 0  # seq of the last op applied (keyless worker)
        self._failing: Batch | None = None  # the batch of the statement running

    def give(self, planned: Job) -> None:
        """Queue ``planned`` (or a plan making it) for this worker (blocks while its queue is full)."""
        self.jobs.put(planned)

    # -- the thread -------------------------------------------------------

    def run(self) -> None:
        if self.number >= 0:  # keyed workers connect at once; the keyless one when first needed
            try:
                self._connection()
            except DB_ERRORS as exc:
                log.warning(
                    "mysql sink worker %d: cannot connect yet: %s",
                    self.number,
                    translate_error(exc, "connect"),
                )
        while True:
            job = self.jobs.get()
            if job is None:
                self._rollback()
                close_quietly(self.conn)
                self.conn = None
                return
            if isinstance(job, Barrier):
                try:
                    result = self._commit_barrier() if job.action == "commit" else self._rollback_barrier()
                except Exception as exc:  # a barrier must always be answered
                    log.exception("mysql sink worker %d: unexpected error at a barrier", self.number)
                    result = SinkApplyError(f"{self._where(job.action)}: unexpected {type(exc).__name__}")
                job.done(result)
            elif self.error is None:
                try:  # a job may be a plan to run first (worker processes: drainer.sinks.mysql.wire)
                    self._apply(job if isinstance(job, list) else job())
                except Exception as exc:  # the thread must live to answer barriers
                    if not isinstance(exc, SinkError):  # SinkError: a plan's refusal, with its message
                        log.exception("mysql sink worker %d: unexpected error", self.number)
                        exc = SinkApplyError(f"{self._where('apply')}: unexpected {type(exc).__name__}")
                    self.error = exc
                    self._abandon()
                    self._held.clear()
                    self._pending = 0

    def _connection(self) -> Any:
        if self.conn is None:
            self._stop_event.wait(self._backoff.delay)
            try:
                self.conn = self.settings.connect(autocommit=False)
            except BaseException:
                self._backoff.next_delay()
                raise
            if self._backoff.failures:
                log.info("mysql sink worker %d: reconnected to %s", self.number, self.settings.dsn.redacted())
            self._backoff.reset()
            self.connection_id = int(self.conn.thread_id())
        return self.conn

    def _apply(self, planned: Sequence[Unit]) -> None:
        """Apply ``planned``; a deadlock, lock wait timeout or lost connection (outside COMMIT) rolls
        the open transaction back and applies every unit since the last commit again, a few times."""
        held = self._held
        start = len(held)
        held.extend(planned)
        attempt = 0
        while True:
            try:
                self._execute(start)
                return
            except _Failed as failed:
                error = failed.error
                self._abandon()
                if (
                    not error.retriable
                    or failed.in_commit
                    or failed.timed_out
                    or attempt >= LOCAL_RETRIES
                    or self._stop_event.is_set()
                ):
                    self.error = error
                    held.clear()
                    self._pending = 0
                    return
                attempt += 1
                self.metrics.retries.labels("worker").inc()
                if _is_deadlock(failed.__cause__):
                    self.metrics.deadlocks.inc()
                log.info(
                    "%s; worker %d applies its %d uncommitted changes again (attempt %d)",
                    error,
                    self.number,
                    sum(u.ops for u in held),
                    attempt,
                )
                self._stop_event.wait(min(0.05 * 2**attempt, self._backoff.cap))
                start = 0
                self._pending = 0

    def _execute(self, start: int) -> None:
        """Run ``_held[start:]``, committing every ``txn-rows``; errors come out as :class:`_Failed`."""
        held = self._held
        index = start
        self._failing = None
        try:
            conn = self._connection()
            rows = self.metrics.rows
            with conn.cursor() as cur:
                for unit in held[start:]:
                    self._run_unit(cur, unit)
                    for (table, kind), count in unit.counts.items():
                        rows.labels(table, kind).inc(count)
                    index += 1
                    self._pending += unit.ops
                    self._high_ts = max(self._high_ts, unit.high_ts)
                    self._seq = unit.seq
                    if self._pending >= self.txn_rows:
                        try:
                            self._commit(conn)
                        except DB_ERRORS as exc:
                            raise _Failed(
                                self._translate(exc, self._where("COMMIT")), in_commit=True
                            ) from exc
                        del held[:index]
                        index = 0
        except DB_ERRORS as exc:
            batch = self._failing
            if batch is not None:
                where = f"mysql sink: commit_ts {batch.commit_ts_text}: table {batch.table.name}"
                raise _Failed(self._translate(exc, where, batch.shape), timed_out=timed_out(exc)) from exc
            raise _Failed(self._translate(exc, self._where("connect")), timed_out=timed_out(exc)) from exc
        except (TypeError, ValueError, ArithmeticError, LookupError) as exc:
            # A value the driver cannot bind, or a bug: never retried, never shown with its value.
            log.exception("mysql sink worker %d: unexpected error", self.number)
            batch = self._failing
            where = (
                f"mysql sink: commit_ts {batch.commit_ts_text}: table {batch.table.name}"
                if batch is not None
                else self._where("apply")
            )
            shape = f"; statement: {batch.shape}" if batch is not None else ""
            raise _Failed(SinkApplyError(f"{where}: {type(exc).__name__} while applying{shape}")) from exc

    def _translate(self, exc: BaseException, where: str, shape: str = "") -> SinkError:
        if timed_out(exc):
            return timeout_error(exc, where, self.settings, shape)
        return translate_error(exc, where, shape)

    def _where(self, what: str) -> str:
        return f"mysql sink worker {self.number}: {what} ({self.settings.dsn.redacted()})"

    def _run_unit(self, cur: Any, unit: Unit) -> None:
        """A unit's statements in as few round trips as fit in STATEMENT_BYTES (multi-statements);
        ``_failing`` names the batch whose statement failed."""
        pending: list[Batch] = []
        size = 0
        for batch in unit.batches:
            if pending and size + len(batch.sql) > STATEMENT_BYTES:
                self._run(cur, pending)
                pending, size = [], 0
            pending.append(batch)
            size += len(batch.sql) + 2
        if pending:
            self._run(cur, pending)

    def _run(self, cur: Any, batches: list[Batch]) -> None:
        started = time.perf_counter()
        # Which batch each statement of the text belongs to, to name the one that fails.
        owners = [b for b in batches for _ in range(b.rows if b.multi else 1)]
        self._failing = owners[0]
        cur.execute(";\n".join(b.sql for b in batches))  # literals only: no % formatting
        for owner in owners[1:]:
            self._failing = owner
            cur.nextset()
        while cur.nextset():  # nothing is left; kept so a miscount can never leave a result unread
            pass
        self._failing = None
        self.metrics.statement_seconds.observe(time.perf_counter() - started)
        batch_rows = self.metrics.batch_rows
        for batch in batches:
            batch_rows.observe(batch.rows)

    def _commit(self, conn: Any) -> None:
        """The progress row and COMMIT in one round trip; nothing when nothing was applied since the
        last commit (an idle worker costs no round trip at a flush)."""
        if not self._held:
            return
        started = time.perf_counter()
        with conn.cursor() as cur:
            progress = cur.mogrify(
                self.progress_sql, (self.cluster_id, self.number, self._high_ts, self._seq)
            )
            cur.execute(progress + ";\nCOMMIT")
            while cur.nextset():
                pass
        self._pending = 0
        self.metrics.commit_seconds.observe(time.perf_counter() - started)

    def _commit_barrier(self) -> SinkError | None:
        if self.error is not None:
            return self.error
        if self.conn is None:
            return None
        try:
            self._commit(self.conn)
        except DB_ERRORS as exc:
            self.error = self._translate(exc, self._where("COMMIT"))
            self._abandon()
            self._held.clear()
            return self.error
        self._held.clear()
        return None

    def _rollback_barrier(self) -> SinkError | None:
        self._rollback()
        self.error = None
        return None

    def _rollback(self) -> None:
        self._held.clear()
        self._pending = 0
        if self.conn is not None:
            try:
                self.conn.rollback()
            except DB_ERRORS:
                close_quietly(self.conn)
                self.conn = None

    def _abandon(self) -> None:
        """After an error: roll back; a connection that failed is closed (reconnect lazily)."""
        close_quietly(self.conn)  # closing discards the open transaction; safest after any failure
        self.conn = None


class Slot(Protocol):
    """Where the dispatcher hands one worker number's changes: a :class:`Worker` thread here (it
    gets them planned), or a :class:`RemoteSlot`."""

    number: int

    @property
    def error(self) -> SinkError | None: ...


class RemoteSlot(Slot, Protocol):
    """A worker in a child process (:class:`~drainer.sinks.mysql.procs.RemoteWorker`): it takes
    the dispatcher's buffer as it is and plans it there."""

    def take(self, buffer: list[Any]) -> None: ...


class Group(Protocol):
    """Workers in one child process: a barrier reaches them all with :meth:`begin` and is answered
    by :meth:`finish` (their errors, or one saying the process died); :meth:`revive` starts a
    dead process again (after the rollback that follows its death)."""

    def start(self) -> None: ...

    def begin(self, action: str) -> None: ...

    def finish(self) -> list[SinkError]: ...

    def revive(self) -> None: ...

    def close(self, timeout: float) -> None: ...

    def announce(self, number: int, schema: bytes) -> None: ...

    def forget(self, below: int) -> None: ...


class WorkerPool:
    """The workers of one sink (the keyed ones, then the keyless one) and the ops the dispatcher
    buffers for each until it hands them over as :func:`~drainer.sinks.mysql.batch.units`.

    ``slots[target]`` is a :class:`Worker` thread of this process or, with ``worker-processes``,
    a worker in one of ``groups`` (child processes); ``workers`` are the threads of this process
    (all of them without ``worker-processes``). A barrier is answered only when every thread and
    every process answered it."""

    def __init__(self, batch_rows: int, batch_updates: bool) -> None:
        self.slots: list[Slot] = []
        self.workers: list[Worker] = []
        self.groups: list[Group] = []
        self.buffers: list[list[Any]] = []  # Op, or wire ops for a worker process
        self.stop = threading.Event()
        self._batch_rows = batch_rows
        self._batch_updates = batch_updates

    def start(self, workers: Sequence[Slot], groups: Sequence[Group] = ()) -> None:
        self.stop.clear()
        self.slots = list(workers)
        self.workers = [w for w in workers if isinstance(w, Worker)]
        self.groups = list(groups)
        self.buffers = [[] for _ in workers]
        for group in self.groups:
            group.start()
        for worker in self.workers:
            worker.start()

    def handoff(self, target: int) -> SinkError | None:
        """Hand ``target`` its buffered ops; the error it failed with instead, if it did."""
        worker = self.slots[target]
        if worker.error is not None:
            return worker.error
        self._send(target)
        return None

    def _send(self, target: int) -> None:
        buffer = self.buffers[target]
        if buffer:
            self.buffers[target] = []
            slot = self.slots[target]
            if isinstance(slot, Worker):
                slot.give(units(buffer, self._batch_rows, self._batch_updates))
            else:  # a worker process plans what it is given (Ops, or rows as bytes)
                cast(RemoteSlot, slot).take(buffer)

    def commit(self) -> list[SinkError]:
        """Every worker applies what it was given and commits; their errors (none: all committed)."""
        for target in range(len(self.slots)):
            self._send(target)
        return self._everyone("commit")

    def rollback(self) -> None:
        """Every worker rolls back what it holds; buffered ops are dropped; a worker process that
        died is started again."""
        self._everyone("rollback")
        for group in self.groups:
            group.revive()
        self.buffers = [[] for _ in self.slots]

    def _everyone(self, action: str) -> list[SinkError]:
        threads = self.workers
        barrier = Barrier(action, len(threads))
        for group in self.groups:
            group.begin(action)
        for worker in threads:
            worker.jobs.put(barrier)
        errors = list(barrier.wait())
        for group in self.groups:
            errors += group.finish()
        return errors

    def close(self, timeout: float) -> None:
        self.stop.set()
        threads = self.workers
        for worker in threads:
            worker.jobs.put(None)
        for group in self.groups:
            group.close(timeout)
        for worker in threads:
            worker.join(timeout=timeout)
        self.slots = []
        self.workers = []
        self.groups = []


ER_LOCK_DEADLOCK = 1213


def _is_deadlock(exc: BaseException | None) -> bool:
    return isinstance(exc, pymysql.err.MySQLError) and bool(exc.args) and exc.args[0] == ER_LOCK_DEADLOCK


class _Failed(Exception):
    def __init__(self, error: SinkError, in_commit: bool = False, timed_out: bool = False) -> None:
        super().__init__(str(error))
        self.error, self.in_commit, self.timed_out = error, in_commit, timed_out

"""The MySQL sink's keyed workers in child processes (``worker-processes`` > 0).

pymysql is pure Python: in one process every worker's client work (sending
statement text, parsing answers) shares one GIL with the dispatcher. With
``worker-processes = N`` the keyed workers (numbers ``0..worker-count-1``) run in
N child processes instead, worker ``w`` in process ``w % N``; the keyless worker
and the dispatcher (reading the key columns, causality) stay in the sink's process,
decoding the rows and planning the statements move to the children.

Each child runs the same :class:`~drainer.sinks.mysql.workers.Worker` threads
the in-process path runs (retries, deadlock handling, progress rows and error
translation are that code), fed by one reader thread from a pipe:

- ``("rows", number, ops)``: a worker's row changes as the row codec's bytes
  (:mod:`drainer.sinks.mysql.wire`: the child decodes and plans them, in that
  worker's thread), after ``("table", n, schema)`` announced each table once
  (``("forget", below)`` drops old ones);
- ``("units", number, wire)``: a worker's planned units in a compact form
  (:func:`pack`: statement text, counts and positions as tuples of str and
  int; no events, no table objects), for events that came decoded (no
  :meth:`raw` on their decoder: not built by the drainer's
  :class:`~drainer.sync.builder.EventBuilder`);
- ``("barrier", action)``: every worker of the child commits (or rolls back)
  what it holds; the child answers ``("done", errors, recorded)`` once all did,
  errors as (class name, message) and what its workers added to the metrics
  (counts and observed times; the sink's process adds them to its own);
- ``("stop",)``: the workers roll back what is uncommitted and the child exits.

The contract is the in-process one: the sink's barrier returns only when every
thread of the sink and every child answered it, so a position is durable only
when every worker in every process committed it. A child that dies (killed,
crashed) is seen at the next barrier — the parent waits on the child's answer
*or* its exit — and answers that barrier with :class:`SinkUnavailable`; the
sink then rolls back as after any retriable failure and this module starts the
child again (the server rolled back the dead child's open transactions when its
connections closed; the events after the last checkpoint are written again in
safe mode). A child dies with its parent: a thread of its own waits on a second
pipe ("lifeline") the parent never writes, and its EOF — the parent killed,
even by SIGKILL, or closed — ends the child at once with ``os._exit``, whatever
its workers are doing; their connections close, the server rolls back their
open transactions and frees their locks, and no worker commits after its
drainer died (a restarted drainer reads the progress rows before it writes).
A child ignores SIGINT (a Ctrl-C reaches the whole process group; the sink's
``close`` stops its children).

Children start with the ``spawn`` context: the sink's process has threads, and a
plain ``fork`` of a threaded process may copy a held lock.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, NamedTuple, cast

from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable
from drainer.sinks.mysql.batch import Batch, Op, Unit, units
from drainer.sinks.mysql.connection import ConnectSettings
from drainer.sinks.mysql.metrics import WORKER_COUNTERS, WORKER_HISTOGRAMS, WorkerMetrics
from drainer.sinks.mysql.translate import TableWriter
from drainer.sinks.mysql.wire import ChildTables
from drainer.sinks.mysql.workers import Barrier, Worker

log = logging.getLogger(__name__)

WireBatch = tuple[str, bool, str, str, str, int, int, int]
WireUnit = tuple[tuple[WireBatch, ...], int, int, int, tuple[tuple[str, str, int], ...]]
_ERRORS: dict[str, type[SinkError]] = {
    "SinkUnavailable": SinkUnavailable,
    "SinkApplyError": SinkApplyError,
}


def pack(planned: Sequence[Unit]) -> list[WireUnit]:
    """``planned`` as tuples of str and int (what crosses the pipe)."""
    return [
        (
            tuple(
                (b.sql, b.multi, b.template, b.table.name, b.kind, b.rows, b.first_ts, b.last_ts)
                for b in unit.batches
            ),
            unit.ops,
            unit.high_ts,
            unit.seq,
            tuple((table, kind, n) for (table, kind), n in unit.counts.items()),
        )
        for unit in planned
    ]


class _Named(NamedTuple):
    """What a worker reads of a batch's table in a child: its name (for messages)."""

    name: str


def unpack(wire: Sequence[WireUnit]) -> list[Unit]:
    """The units :func:`pack` was given, as a worker runs them (a batch's table is only its name)."""
    return [
        Unit(
            [
                Batch(sql, multi, template, cast(TableWriter, _Named(name)), kind, rows, first, last)
                for sql, multi, template, name, kind, rows, first, last in batches
            ],
            ops,
            high_ts,
            seq,
            {(table, kind): n for table, kind, n in counts},
        )
        for batches, ops, high_ts, seq, counts in wire
    ]


@dataclass(frozen=True)
class WorkerSpec:
    """What a child needs to build its workers (sent once, at its start)."""

    settings: ConnectSettings
    batch_rows: int
    txn_rows: int
    progress_sql: str
    cluster_id: int
    retry_max: float
    log_level: int
    join_timeout: float
    batch_updates: bool = True


# -- the child ------------------------------------------------------------------------------

PARENT_GONE = 3  # a child's exit code when it saw the sink's process go
Recorded = list[tuple[str, tuple[str, ...], float]]  # (metric, labels, amount or observed value)


class _Recorder:
    """Stands in for one metric in a child: what the workers add or observe is kept until the next
    barrier answer carries it to the sink's process (:meth:`WorkerProcess.finish` adds it there)."""

    def __init__(self, name: str, kept: Recorded, labels: tuple[str, ...] = ()) -> None:
        self.name, self.kept, self._labels = name, kept, labels

    def labels(self, *values: str) -> _Recorder:
        return _Recorder(self.name, self.kept, values)

    def inc(self, amount: float = 1) -> None:
        self.kept.append((self.name, self._labels, amount))

    def observe(self, amount: float) -> None:
        self.kept.append((self.name, self._labels, amount))


def _recording(recorded: Recorded) -> WorkerMetrics:
    """A child's worker metrics: each keeps what is added or observed in ``recorded``."""
    return WorkerMetrics(
        **{name: _Recorder(name, recorded) for name in (*WORKER_COUNTERS, *WORKER_HISTOGRAMS)}
    )


def _record(recorded: Recorded, metrics: WorkerMetrics) -> None:
    """Add what a child's workers recorded to this process's ``metrics``."""
    for name, labels, amount in recorded:
        metric = getattr(metrics, name)
        target = metric.labels(*labels) if labels else metric
        if name in WORKER_COUNTERS:
            target.inc(amount)
        elif name in WORKER_HISTOGRAMS:
            target.observe(amount)


def _watch_parent(lifeline: Connection) -> None:
    """Exit at once when the sink's process is gone (its end of ``lifeline`` closes with it).

    Nothing is ever sent on ``lifeline``: its EOF is the parent's death, seen even while the main
    thread waits to hand a worker its units. ``os._exit`` closes the workers' connections without a
    word, so the server rolls their open transactions back and releases their locks before a
    restarted drainer reads the progress rows; no worker commits after its drainer died."""
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv()
    os._exit(PARENT_GONE)


def child_main(conn: Connection, lifeline: Connection, numbers: tuple[int, ...], spec: WorkerSpec) -> None:
    """A child's life: workers ``numbers`` as threads, fed from ``conn`` until stop; it ends at once
    when the sink's process is gone (:func:`_watch_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group: the sink stops us
    threading.Thread(target=_watch_parent, args=(lifeline,), name="parent-watch", daemon=True).start()
    logging.basicConfig(
        level=spec.log_level, format="%(asctime)s %(levelname)s %(name)s (worker process): %(message)s"
    )
    recorded: Recorded = []
    metrics = _recording(recorded)  # this process's metrics are never served
    stop = threading.Event()
    tables = ChildTables()
    workers = {
        number: Worker(
            number,
            spec.settings,
            batch_rows=spec.batch_rows,
            txn_rows=spec.txn_rows,
            progress_sql=spec.progress_sql,
            cluster_id=spec.cluster_id,
            retry_max=spec.retry_max,
            stop=stop,
            metrics=metrics,
        )
        for number in numbers
    }
    for worker in workers.values():
        worker.start()
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                os._exit(PARENT_GONE)  # the sink's process is gone (see _watch_parent)
            if message[0] == "rows":
                workers[message[1]].give(tables.plan(message[2], spec.batch_rows, spec.batch_updates))
            elif message[0] == "units":
                workers[message[1]].give(unpack(message[2]))
            elif message[0] == "table":
                tables.add(message[1], message[2])
            elif message[0] == "forget":
                tables.forget(message[1])
            elif message[0] == "barrier":
                barrier = Barrier(message[1], len(workers))
                for worker in workers.values():
                    worker.jobs.put(barrier)
                errors = [(type(e).__name__, str(e)) for e in barrier.wait()]
                conn.send(("done", errors, recorded[:]))
                recorded.clear()
            else:
                return
    finally:
        stop.set()
        for worker in workers.values():
            worker.jobs.put(None)
        for worker in workers.values():
            worker.join(timeout=spec.join_timeout)
        conn.close()


# -- the sink's side -------------------------------------------------------------------------


class RemoteWorker:
    """The dispatcher's handle of a worker in a child process (a :class:`workers.Slot`)."""

    def __init__(self, number: int, group: WorkerProcess) -> None:
        self.number, self.group = number, group

    @property
    def error(self) -> SinkError | None:
        return self.group.error

    def take(self, buffer: list[Any]) -> None:
        """``buffer`` in dispatch order: runs of wire ops as they are (the child plans them), runs
        of :class:`Op` (events that came decoded) planned here."""
        spec = self.group.spec
        start = 0
        for end in range(1, len(buffer) + 1):
            if end == len(buffer) or type(buffer[end]) is not type(buffer[start]):
                run = buffer[start:end]
                if isinstance(run[0], Op):
                    planned = units(run, spec.batch_rows, spec.batch_updates)
                    self.group.send(("units", self.number, pack(planned)))
                else:
                    self.group.send(("rows", self.number, run))
                start = end


class WorkerProcess:
    """One child process running the workers ``numbers`` (a :class:`workers.Group`)."""

    def __init__(self, index: int, numbers: Sequence[int], spec: WorkerSpec, metrics: WorkerMetrics) -> None:
        self.index, self.numbers, self.spec = index, tuple(numbers), spec
        self.metrics = metrics  # what the child's workers recorded is added here
        self.error: SinkError | None = None  # set once the child is known dead
        self._conn: Connection | None = None
        self._lifeline: Connection | None = None  # never written: the child's EOF when we are gone
        self._proc: BaseProcess | None = None
        self._waiting = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def slots(self) -> list[RemoteWorker]:
        return [RemoteWorker(number, self) for number in self.numbers]

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")  # never fork: this process has threads
        mine, theirs = context.Pipe()
        watched, lifeline = context.Pipe(duplex=False)
        proc = context.Process(
            target=child_main,
            args=(theirs, watched, self.numbers, self.spec),
            name=f"mysql-sink-workers-{self.index}",
            daemon=True,
        )
        proc.start()
        theirs.close()
        watched.close()
        self._conn, self._lifeline, self._proc, self.error = mine, lifeline, proc, None
        log.info(
            "mysql sink: worker process %d (pid %s) runs workers %s",
            self.index,
            proc.pid,
            ",".join(map(str, self.numbers)),
        )

    def send(self, message: tuple[Any, ...]) -> None:
        if self.error is not None or self._conn is None:
            return
        try:
            self._conn.send(message)
        except (OSError, ValueError):
            self._died()

    def announce(self, number: int, schema: bytes) -> None:
        """Table ``number`` (its TableSchema bytes), before any row of it is sent."""
        self.send(("table", number, schema))

    def forget(self, below: int) -> None:
        self.send(("forget", below))

    def begin(self, action: str) -> None:
        self.send(("barrier", action))
        self._waiting = self.error is None

    def finish(self) -> list[SinkError]:
        if self._waiting and self._conn is not None and self._proc is not None:
            self._waiting = False
            try:
                if not self._conn.poll():
                    wait([self._conn, self._proc.sentinel])  # its answer, or its exit
                if self._conn.poll():
                    _, errors, recorded = self._conn.recv()
                    _record(recorded, self.metrics)
                    return [_ERRORS.get(name, SinkError)(text) for name, text in errors]
            except (EOFError, OSError):
                pass
            self._died()
        return [self.error] if self.error is not None else []

    def revive(self) -> None:
        if self.error is not None:
            self._reap(0.0)
            self.start()

    def close(self, timeout: float) -> None:
        if self._proc is None:
            return
        self.send(("stop",))
        self._reap(timeout)

    def _died(self) -> None:
        if self.error is None:
            self._reap(1.0)
            code = self._proc.exitcode if self._proc is not None else None
            self.error = SinkUnavailable(
                f"mysql sink: worker process {self.index} (pid {self.pid}, workers "
                f"{','.join(map(str, self.numbers))}) is gone (exit code {code}); its uncommitted "
                "changes are written again"
            )
            log.warning("%s", self.error)

    def _reap(self, timeout: float) -> None:
        proc, conn = self._proc, self._conn
        if proc is not None:
            proc.join(timeout)
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
        for end in (conn, self._lifeline):
            if end is not None:
                end.close()
        self._conn = self._lifeline = None


def make_groups(
    worker_count: int, processes: int, spec: WorkerSpec, metrics: WorkerMetrics
) -> list[WorkerProcess]:
    """``processes`` groups for keyed workers ``0..worker_count-1`` (worker w in group w % processes)."""
    return [
        WorkerProcess(index, range(index, worker_count, processes), spec, metrics)
        for index in range(processes)
    ]

"""Runs a load: creates the tables, then workers and the DDL thread until time is up or stop is set.

Each worker is a thread with its own upstream connection (through the
writer's pool) and its own generator (seed and worker index). A transaction
that fails with a retriable error (deadlock, lock wait, busy database) is
retried with the same plan up to ``attempts`` times; one that still fails is
counted in ``errors`` and the worker goes on. Stopping (SIGINT/SIGTERM set
``stop``) lets every in-flight transaction finish — commit, or roll back on
its own error — before the threads end.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from bridge.apps.load.options import LoadOptions
from bridge.apps.load.plans import PLANNERS
from bridge.apps.load.schema_changes import SchemaChanger
from bridge.apps.load.stats import Stats
from bridge.apps.load.workload import INDEXES, KEYED, TABLES, Plan, Worker
from bridge.errors import BridgeError
from bridge.producer.writer import TxnWriter
from bridge.retry import Backoff

log = logging.getLogger(__name__)

_LOGGED_ERRORS = 5  # errors logged one by one; after that every 100th


def create_schema(writer: TxnWriter, options: LoadOptions, stats: Stats) -> dict[str, int]:
    """Create the load's tables through the writer's DDL (so consumers see them) and the shared
    accounts; the first free id of each owned table."""
    for sql in TABLES.values():
        if writer.ddl(sql) is not None:
            stats.ddl_committed()
    for name, (table, sql) in INDEXES.items():
        if name not in {index.name for index in writer.schema(table).indexes} and writer.ddl(sql) is not None:
            stats.ddl_committed()
    q = writer.upstream.dialect.quote
    highest = writer.read(f"SELECT MAX({q('id')}) FROM {q('load_accounts')}")[0][0] or 0  # noqa: S608
    if highest < options.accounts:
        maker = Worker(-1, 1, options.seed, {t: 1 for t in KEYED}, options.accounts)
        rows = [maker.account_row(key) for key in range(int(highest) + 1, options.accounts + 1)]
        with writer.transaction() as txn:
            for row in rows:
                txn.insert("load_accounts", row)
        stats.committed(txn.rows)
    bases = {}
    for table in KEYED:
        found = writer.read(f"SELECT MAX({q('id')}) FROM {q(table)}")[0][0]  # noqa: S608
        bases[table] = int(found or 0) + 1
    return bases


class LoadRunner:
    def __init__(self, writer: TxnWriter, options: LoadOptions, stats: Stats, stop: threading.Event) -> None:
        self._writer = writer
        self._options = options
        self._stats = stats
        self._stop = stop
        self._errors_logged = 0
        self.crashed: BaseException | None = None

    def run(self, bases: dict[str, int]) -> float:
        """Run for ``options.seconds`` or until ``stop``; the seconds it ran."""
        opts = self._options
        workers = [
            Worker(i, opts.concurrency, opts.seed, bases, opts.accounts) for i in range(opts.concurrency)
        ]
        threads = [
            threading.Thread(target=self._guard(self._work, w), name=f"load-worker-{w.index}")
            for w in workers
        ]
        if opts.ddl:
            changer = SchemaChanger(self._writer, self._stats, opts.seed)
            ddl = self._guard(lambda: changer.run(self._stop, opts.ddl_interval))
            threads.append(threading.Thread(target=ddl, name="load-ddl"))
        started = time.monotonic()
        for thread in threads:
            thread.start()
        self._stop.wait(opts.seconds)
        self._stop.set()
        for thread in threads:
            thread.join()
        return time.monotonic() - started

    def _guard(self, body: Callable[..., None], *args: object) -> Callable[[], None]:
        """A thread body that stops the whole run if it crashes (a bug, not a transaction error)."""

        def guarded() -> None:
            try:
                body(*args)
            except BaseException as exc:
                log.exception("load thread %s crashed", threading.current_thread().name)
                self.crashed = exc
                self._stop.set()

        return guarded

    def _work(self, worker: Worker) -> None:
        opts = self._options
        kinds = [k for k, weight in opts.mix.items() if weight > 0]
        weights = [opts.mix[k] for k in kinds]
        interval = opts.concurrency / opts.rate if opts.rate else 0.0
        next_at = time.monotonic() + worker.index * interval / opts.concurrency
        while not self._stop.is_set():
            if interval:
                next_at = max(next_at + interval, time.monotonic() - interval)
                delay = next_at - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    break
            kind = worker.rng.choices(kinds, weights)[0]
            self._execute(worker, PLANNERS[kind](worker, opts.txn_size, opts.large_size))

    def _execute(self, worker: Worker, plan: Plan) -> None:
        backoff = Backoff(initial=0.005, cap=0.005 * self._options.attempts)
        for attempt in range(1, self._options.attempts + 1):
            try:
                with self._writer.transaction() as txn:
                    plan.run(txn)
            except BridgeError as exc:
                if exc.retriable and attempt < self._options.attempts:
                    self._stats.rolled_back()
                    # Jittered, so conflicting workers do not retry in lockstep.
                    time.sleep(backoff.next_delay() * (1 + random.random()))  # noqa: S311 - jitter only
                    continue
                self._stats.failed()
                self._log_error(plan.kind, exc)
                return
            worker.commit(plan)
            self._stats.committed(txn.rows)
            return

    def _log_error(self, kind: str, exc: BaseException) -> None:
        self._errors_logged += 1
        if self._errors_logged <= _LOGGED_ERRORS or self._errors_logged % 100 == 0:
            log.warning("a %s transaction failed (%d so far): %s", kind, self._errors_logged, exc)

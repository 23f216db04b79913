"""Writing transactions to the pumps on a thread of its own, in order, while the next ones are read.

Reading and decoding the binlog is CPU work; writing a transaction is mostly
waiting (two TSO calls, the Prewrite and Commit round trips, the journal's
fsyncs). :class:`WriteBehind` overlaps the two: the reader hands each
finished transaction to :meth:`WriteBehind.rows` and goes on; one writer
thread writes them through the :class:`~bridge.apps.capture.emitter.Emitter`
strictly in the order handed over, so commit_ts still follow the upstream's
commit order. At most ``depth`` transactions wait; the reader blocks beyond
that.

A DDL changes the schemas the reader decodes the following rows with, so the
reader first waits for everything handed over to be written
(:meth:`WriteBehind.drain`) and writes the DDL itself. A write that fails
stops the writer; the error is raised to the reader at its next call.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from bridge.apps.capture.emitter import Emitter
from bridge.apps.capture.journal import Journal
from bridge.apps.capture.position import Position
from bridge.proto import binlog_pb2

Job = Callable[[], None]


class WriteBehind:
    def __init__(
        self, emitter: Emitter, journal: Journal, on_written: Callable[[int], None], depth: int = 8
    ) -> None:
        self._emitter = emitter
        self._journal = journal
        self._on_written = on_written  # row changes of each transaction once written
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="capture-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                if self._error is None:
                    job()
            except BaseException as exc:  # noqa: BLE001 - handed to the reader, which stops the capture
                self._error = exc
            finally:
                self._jobs.task_done()
        self._jobs.task_done()

    def _submit(self, job: Job) -> None:
        self._raise_error()
        self._jobs.put(job)

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def rows(self, mutations: list[binlog_pb2.TableMutation], position: Position, rows: int) -> None:
        """Write one DML transaction after those handed over before it."""

        def job() -> None:
            self._emitter.rows(mutations, position)
            self._on_written(rows)

        self._submit(job)

    def moved(self, position: Position) -> None:
        """Journal a position reached without a binlog, in turn."""
        self._submit(lambda: self._journal.moved(position))

    def drain(self) -> None:
        """Wait until everything handed over is written; raise the writer's error if one stopped it."""
        self._jobs.join()
        self._raise_error()

    def close(self) -> None:
        """Write what was handed over, then stop the thread."""
        self._jobs.put(None)  # the end
        self._thread.join()

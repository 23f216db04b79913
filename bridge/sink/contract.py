"""The ``Sink`` base class every downstream implements, and the context it is opened with.

A sink is driven from one thread (the drainer's sink thread, ``replay``,
``consume --apply``; always through :class:`bridge.sink.driver.SinkDriver`),
in this order::

    sink = SinkClass(config, data_dir)   # [sink.<type>] table; checks every key (ConfigError)
    sink.check()                         # the drainer's pre-flight, before it says ready (optional)
    sink.open(context)                   # once; context.resume_ts = the checkpoint's commit_ts
    sink.write(events)                   # many times; events in strictly increasing commit_ts
    position = sink.flush()              # often; also before every checkpoint save
    sink.close()                         # once, after a final flush on a clean stop

Contract:

- ``check()``: connects to the downstream and verifies the sink can work
  there (login, privileges, broker metadata, ``PING``), then lets go of
  what it opened. It raises :class:`~bridge.sink.errors.SinkCheckFailed`
  with one line naming what failed and where; it does not retry. The
  default checks nothing (a sink writing local files has nothing to reach).
- ``open(context)``: the drainer will next write the first event with
  ``commit_ts > context.resume_ts``. Everything a sink learns from the
  drainer arrives here (:class:`SinkContext`: cluster id, the tables that
  exist at ``resume_ts``, the safe-mode flag, a metrics registry) and through
  the events; there are no other hooks. All state after a restart must be
  derived from the context (and the downstream itself); a sink keeps no other
  memory of what it wrote. After a crash the events just above
  ``resume_ts`` may be written a second time: apply them idempotently or say
  in the sink's docs how duplicates look (e.g. Kafka: at-least-once, dedupe
  by commit_ts+key). ``open`` may be called again after it raised a
  retriable error.
- ``write(events)``: may buffer. It must not reorder transactions that touch
  the same row, and must apply a :class:`~bridge.sink.events.DDLEvent` only
  after every earlier event is applied. It raises :mod:`bridge.errors`
  subclasses (:mod:`bridge.sink.errors`); ``retriable`` ones are retried by
  the driver with the same events after ``flush`` failed or ``write``
  raised, non-retriable ones stop the drainer with the message (which must
  name the table and commit_ts, never values).
- ``flush() -> int``: makes everything written so far durable downstream and
  returns the highest commit_ts such that every event at or below it is
  durable (ResolvedEvent included). The checkpoint never moves past it.
- ``close()``: releases connections and files; no writes follow.

Sinks are synchronous on purpose: database drivers are, and the drainer runs
them on their own thread so pulling and merging continue meanwhile.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry

from bridge.proto import row_pb2
from bridge.sink.events import Event
from bridge.sink.schema import SchemaTracker


@dataclass(frozen=True)
class SinkContext:
    """What a sink is told when it is opened.

    - ``resume_ts``: every event written next has a higher commit_ts.
    - ``cluster_id``: the upstream cluster replicated (e.g. to key progress
      rows kept downstream, or to name the source of published messages).
    - ``tables``: every table that exists at ``resume_ts`` (by table id).
    - ``schema_snapshot``: the same, in the schema tracker's snapshot format
      (:meth:`bridge.sink.schema.SchemaTracker.snapshot`).
    - ``safe_mode``: events just above ``resume_ts`` may have been applied
      before (relay-log recovery): apply every one idempotently (INSERT as
      REPLACE, UPDATE as DELETE + REPLACE), whatever the sink's own settings.
    - ``data_dir``: the drainer's data directory.
    - ``metrics_registry``: where the sink registers metrics it creates per
      instance (the process-wide registry unless a test passes its own).
    """

    resume_ts: int = 0
    cluster_id: int = 0
    tables: tuple[row_pb2.TableSchema, ...] = ()
    schema_snapshot: bytes = b""
    safe_mode: bool = False
    data_dir: Path = Path(".")
    metrics_registry: CollectorRegistry = field(default=REGISTRY, compare=False)

    @classmethod
    def at(
        cls,
        resume_ts: int,
        schema_snapshot: bytes = b"",
        *,
        cluster_id: int = 0,
        safe_mode: bool = False,
        data_dir: Path = Path("."),
        metrics_registry: CollectorRegistry = REGISTRY,
    ) -> SinkContext:
        """The context at ``resume_ts`` with the tables of ``schema_snapshot``
        (raises :class:`~bridge.sink.schema.SchemaTrackError` when it is unreadable)."""
        tracker = SchemaTracker.restore(schema_snapshot)
        return cls(
            resume_ts=resume_ts,
            cluster_id=cluster_id,
            tables=tuple(tracked.schema for tracked in tracker.tables),
            schema_snapshot=schema_snapshot,
            safe_mode=safe_mode,
            data_dir=data_dir,
            metrics_registry=metrics_registry,
        )


class Sink(ABC):
    """The base of every sink; see the module docstring for the contract.

    ``open`` keeps the context in ``self.context`` and ``close`` does
    nothing: a sink that needs nothing more from them inherits these.
    """

    name: str = "sink"
    context: SinkContext = SinkContext()

    def check(self) -> None:
        """The pre-flight check (see the module docstring); nothing to check by default."""
        return None

    def open(self, context: SinkContext) -> None:
        self.context = context

    @abstractmethod
    def write(self, events: Sequence[Event]) -> None: ...

    @abstractmethod
    def flush(self) -> int: ...

    def close(self) -> None:
        return None

"""The ``Sink`` base class every downstream implements, and the context it is opened with.

A sink is driven from one thread (the drainer's sink thread, ``replay``,
``consume --apply``; always through :class:`bridge.sink.driver.SinkDriver`),
in this order::

    sink = SinkClass(config, data_dir)   # [sink.<type>] table; checks every key (ConfigError)
    sink.check()                         # the drainer's pre-flight, before it says ready (optional)
    sink.open(context)                   # once (again after a failed open or a close)
    sink.write(events)                   # many times; events in strictly increasing commit_ts
    position = sink.flush()              # often; also before every checkpoint save
    sink.close()                         # once, after a final flush on a clean stop

Each method's guarantee is stated on the method itself (:class:`Sink`); the
suite ``tests/contract/`` runs every registered sink through them.
:class:`bridge.sink.batching.BatchingSink` is a base that keeps the
bookkeeping (failure latch, rate-limited warnings, per-sink metrics) for
sinks that batch their writes.

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
    """The base of every sink: the order of calls is the module docstring's, each method's
    guarantee is its own docstring.

    ``open`` keeps the context in ``self.context`` and ``close`` does
    nothing: a sink that needs nothing more from them inherits these.
    """

    name: str = "sink"
    context: SinkContext = SinkContext()

    def check(self) -> None:
        """Connect to the downstream, verify the sink can work there (login, privileges, broker
        metadata, ``PING``), then let go of what was opened.

        Raises :class:`~bridge.sink.errors.SinkCheckFailed` with one line naming what failed
        and where; never retries. The default checks nothing (a sink writing local files has
        nothing to reach).
        """
        return None

    def open(self, context: SinkContext) -> None:
        """Get ready to write the first event with ``commit_ts > context.resume_ts``.

        - Everything a sink learns from the drainer arrives here (:class:`SinkContext`) and
          through the events; there are no other hooks. All state after a restart is derived
          from the context and the downstream itself: the sink keeps no other memory of what
          it wrote.
        - After a crash the events just above ``resume_ts`` may come a second time: apply
          them idempotently, or say in the sink's docs how duplicates look (e.g. Kafka:
          at-least-once, dedupe by commit_ts and key).
        - ``open`` is called again after it raised a retriable error (the driver retries it)
          and after :meth:`close` (the drainer reopens a sink at its flushed position to find
          a refused change). Either way nothing of the earlier open may stay open: an ``open``
          that raises releases what it acquired, and a sink is never opened twice without a
          ``close`` or a failed ``open`` between.
        """
        self.context = context

    @abstractmethod
    def write(self, events: Sequence[Event]) -> None:
        """Write ``events`` (strictly increasing commit_ts); may buffer.

        - Transactions that touch the same row are never reordered; a
          :class:`~bridge.sink.events.DDLEvent` is applied only after every earlier event,
          wherever it sits in ``events``.
        - Raises :mod:`bridge.errors` subclasses (:mod:`bridge.sink.errors`). A ``retriable``
          one makes the driver write the same events again (after a failed ``write``) or every
          event since the last successful flush (after a failed :meth:`flush`); so a failed
          ``write`` leaves no partial effect that a second write would duplicate, and events
          the sink already holds are skipped. A non-retriable one stops the drainer with its
          message, which names the table and commit_ts, never values.
        """

    @abstractmethod
    def flush(self) -> int:
        """Make everything written so far durable downstream; return the highest commit_ts such
        that every event at or below it is durable (ResolvedEvents included).

        The checkpoint never moves past the returned position, so it never passes a write the
        downstream did not acknowledge, even after a failed flush and before anything is
        written again. A flush that cannot make the writes durable raises (retriable: the
        driver writes every unflushed event again, then flushes).
        """

    def close(self) -> None:
        """Release connections and files; no writes follow until the next :meth:`open`."""
        return None

"""The change events every sink gets: decoded, ordered, with the schemas they need.

The drainer's syncer (and ``replay``, and ``consume --apply``) hand a sink, in
strictly increasing ``commit_ts``:

- :class:`TxnEvent` — one committed transaction. Its row changes are decoded
  lazily from the pulled binlog with the table schemas valid at its
  ``commit_ts`` (captured when the event is built), so a later DDL never
  changes how an earlier transaction decodes, and a transaction of a
  million rows is never held decoded in memory. ``changes()`` may be called
  more than once; each call decodes again.
- :class:`DDLEvent` — one DDL: its ``SchemaChange`` and the table's schema
  ``before`` it (None for CREATE TABLE and database DDL) and ``after`` it
  (None for DROP TABLE and database DDL), so a sink follows every table's
  schema from the context it was opened with and these events alone.
- :class:`ResolvedEvent` — "every transaction with commit_ts <= ts has been
  emitted": sinks that publish watermarks (Kafka) forward it; every sink may
  report it as durable once everything before it is.

Every event carries ``payload``, the binlog bytes as pulled from the pump
(commit_ts set), so the file sink can store what a replay needs; a
transaction that travelled in chunks also carries ``parts`` (the chunk
binlogs before ``payload``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec

ChangeKind = Literal["insert", "update", "delete"]
# One row change undecoded: kind, the table's schema, the before and after images as the row
# codec's bytes, and the codec that decodes them.
RawChange = tuple[ChangeKind, row_pb2.TableSchema, bytes | None, bytes | None, RowCodec]


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row change. ``before``/``after`` hold one value per column in
    ``table.columns`` order (:mod:`bridge.rowcodec` types); inserts have no
    ``before``, deletes no ``after``."""

    kind: ChangeKind
    table: row_pb2.TableSchema
    before: tuple[object, ...] | None
    after: tuple[object, ...] | None
    # an insert an initial snapshot read (TableMutation.snapshot, binlog-bridge capture): applied
    # as an insert; the Kafka envelope says op "r"
    snapshot: bool = False


@dataclass(frozen=True, slots=True)
class TxnEvent:
    start_ts: int
    commit_ts: int
    payload: bytes
    # Decodes the changes in the transaction's order (TableMutation.sequence,
    # mutations in binlog order). Built by the syncer; raises
    # bridge.errors.ProtocolError naming table and commit_ts on a row that does
    # not fit its schema.
    decode: Callable[[], Iterator[RowChange]] = field(repr=False)
    row_count: int = 0
    # The same changes undecoded, where the rows come straight from the binlog (the drainer's
    # EventBuilder); None where they were made or renamed on the way (routing, consume). For a
    # sink that hands rows to other processes undecoded (the MySQL sink's worker processes).
    raw: Callable[[], Iterator[RawChange]] | None = field(default=None, repr=False)
    # A transaction that travelled in chunks (binlog.proto ``Binlog.chunk``): its PrewriteChunk
    # binlogs as pulled (commit_ts set), in order, read back one at a time; ``payload`` is the
    # last part (the Prewrite, re-typed Commit). None for a transaction that came as one binlog.
    # A sink that stores binlogs for a replay (file, relay, dead letters) stores every part and
    # then ``payload``; ``decode``/``raw`` already cover every part.
    parts: Callable[[], Iterator[bytes]] | None = field(default=None, repr=False)

    def changes(self) -> Iterator[RowChange]:
        return self.decode()


@dataclass(frozen=True, slots=True)
class DDLEvent:
    """One DDL. ``before``: the table as it was (None for CREATE TABLE and database DDL);
    ``after``: the table as it is after (None for DROP TABLE and database DDL). For RENAME
    TABLE ``before`` has the old name, ``after`` the new one."""

    start_ts: int
    commit_ts: int
    payload: bytes
    query: str
    change: row_pb2.SchemaChange
    before: row_pb2.TableSchema | None
    after: row_pb2.TableSchema | None


@dataclass(frozen=True, slots=True)
class ResolvedEvent:
    commit_ts: int


Event = TxnEvent | DDLEvent | ResolvedEvent

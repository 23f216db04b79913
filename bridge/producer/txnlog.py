"""The pump side of a transaction: where its binlogs go and how the second phase is sent.

:class:`BinlogSink` is what the writer needs from the pump client —
:class:`bridge.pumpclient.PumpsClient` provides it (``get_timestamps`` from
the meta service's TSO, ``write_binlog`` to the pumps).
"""

from __future__ import annotations

import logging
from typing import Protocol

from bridge.errors import CommitRefused, PumpError
from bridge.producer.status import STATUS_TABLE
from bridge.proto import binlog_pb2

log = logging.getLogger(__name__)


class BinlogSink(Protocol):
    """Timestamps and binlog delivery; :class:`bridge.pumpclient.PumpsClient` is one.

    The writer batches concurrent timestamp requests into ``get_timestamps``
    calls (:mod:`bridge.producer.timestamps`).
    """

    def get_timestamps(self, count: int = 1) -> int:
        """Allocate ``count`` consecutive fresh TSO timestamps; the first of them."""

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> None:
        """Write one binlog. A Prewrite returns once durable on a pump, or raises."""


def prewrite_key(database: str, start_ts: int) -> bytes:
    """The producer-side key of a transaction: its ``bridge_txn_status`` row."""
    return f"{database}.{STATUS_TABLE}/{start_ts}".encode()


def send_second_phase(pumps: BinlogSink, binlog: binlog_pb2.Binlog) -> None:
    """Write a Commit or Rollback binlog once the upstream outcome is decided.

    The outcome stands whatever happens here, so a failure is logged, not
    raised: the pump holding the Prewrite settles it through its lost-commit
    resolver (the pump client itself returns normally for an undelivered
    Commit after its ``write-timeout``). A Commit the pump refuses because its
    resolver already settled the Prewrite (:class:`CommitRefused`) is logged
    as such: the transaction may be missing from the stream.
    """
    try:
        pumps.write_binlog(binlog)
    except CommitRefused as exc:
        # the resolver already settled the Prewrite: if it found the transaction committed it
        # was delivered at the resolver's commit_ts; otherwise this upstream commit is not in
        # the stream, and the operator must hear it as such (docs/pump-operations.md)
        log.error(
            "the Commit binlog of start_ts %d was refused by the pump (%s): unless the pump's "
            "resolver found it committed, this transaction is NOT replicated",
            binlog.start_ts,
            exc,
        )
    except (PumpError, RuntimeError) as exc:
        kind = binlog_pb2.BinlogType.Name(binlog.tp)
        log.error(
            "the %s binlog of start_ts %d was not written (%s); the pump's lost-commit resolver "
            "will settle the transaction",
            kind,
            binlog.start_ts,
            exc,
        )

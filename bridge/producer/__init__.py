"""Producers: the transactional writer over an upstream database (MySQL/MariaDB or SQLite).

- :class:`TxnWriter` / :class:`Transaction` — run transactions and DDL upstream
  and write their binlogs two-phase through a pump client (``writer.py``);
- :func:`open_upstream` — an :class:`Upstream` from a DSN (``mysql.py``,
  ``sqlite.py``), :func:`parse_dsn` — the DSN forms (``dsn.py``);
- errors in ``errors.py``. The guide is docs/producers.md.
"""

from bridge.dsn import Dsn, parse_dsn
from bridge.producer.ddl import DdlResult
from bridge.producer.errors import (
    CommitFailed,
    CommitUnknown,
    DdlNotLogged,
    PrewriteFailed,
    ProducerError,
    SchemaDrift,
    UnknownTable,
    UnsupportedSchema,
    UpstreamConflict,
    UpstreamError,
    UpstreamUnavailable,
)
from bridge.producer.open import open_upstream
from bridge.producer.txnlog import BinlogSink
from bridge.producer.upstream import Upstream
from bridge.producer.writer import Transaction, TxnWriter

__all__ = [
    "BinlogSink",
    "CommitFailed",
    "CommitUnknown",
    "DdlNotLogged",
    "DdlResult",
    "Dsn",
    "PrewriteFailed",
    "ProducerError",
    "SchemaDrift",
    "Transaction",
    "TxnWriter",
    "UnknownTable",
    "UnsupportedSchema",
    "Upstream",
    "UpstreamConflict",
    "UpstreamError",
    "UpstreamUnavailable",
    "open_upstream",
    "parse_dsn",
]

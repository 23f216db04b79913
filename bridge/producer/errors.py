"""The producers' exceptions, under :class:`bridge.errors.BridgeError`.

::

    ProducerError                  base of everything the writer raises on purpose
    ├── UpstreamError              the upstream database refused or failed a statement
    │   ├── UpstreamConflict       deadlock or lock wait timeout: retry the transaction (retriable)
    │   └── UpstreamUnavailable    no connection, or it broke (retriable)
    ├── UnknownTable (UserError)   the table has no live schema in ``bridge_schema``
    ├── UnsupportedSchema (UserError)  a column type, table shape or DDL the writer cannot carry
    ├── SchemaDrift (UserError)    the upstream table differs from the schema its last DDL binlog carried
    ├── PrewriteFailed             the Prewrite binlog was not written; the upstream rolled back
    ├── CommitFailed               the upstream COMMIT failed after the Prewrite; a Rollback binlog was sent
    ├── CommitUnknown              the COMMIT outcome is unknown; the pump's lost-commit resolver settles it
    └── DdlNotLogged               a DDL ran upstream (MySQL: it cannot be undone) but its binlog was lost

pymysql and sqlite3 exceptions are translated into :class:`UpstreamError` in
exactly one place per upstream (``mysql.py``, ``sqlite.py``), with ``raise
... from exc``; pump client errors stay what they are and are chained.
"""

from __future__ import annotations

from bridge.errors import BridgeError, Unreachable, UserError


class ProducerError(BridgeError):
    """Base of the producers' errors."""


class UpstreamError(ProducerError):
    """The upstream database failed a statement. ``code`` is the server's error number (0 if none)."""

    def __init__(self, message: str, *, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class UpstreamConflict(UpstreamError):
    """A deadlock or lock wait timeout rolled the statement (or transaction) back; retry the transaction."""

    retriable = True


class UpstreamUnavailable(UpstreamError, Unreachable):
    """The upstream could not be reached, or the connection broke mid-transaction."""

    retriable = True


class UnknownTable(ProducerError, UserError):
    """A DML statement named a table that was not created (or was dropped) through the writer."""


class UnsupportedSchema(ProducerError, UserError):
    """A column type, table shape or DDL statement the writer cannot represent; names what."""


class SchemaDrift(ProducerError, UserError):
    """The live upstream table no longer matches the schema recorded by its last DDL binlog.

    A DDL ran outside the writer, or a DDL's binlog was lost (:class:`DdlNotLogged`).
    """


class PrewriteFailed(ProducerError):
    """The Prewrite binlog could not be written; the upstream transaction was rolled back.

    Not retriable: the pump client already retried for its ``write-timeout``.
    """


class CommitFailed(ProducerError):
    """The upstream COMMIT failed after the Prewrite was written; a Rollback binlog followed."""


class CommitUnknown(ProducerError):
    """Whether the upstream committed is unknown (e.g. the connection broke during COMMIT).

    No second-phase binlog was written: the pump's lost-commit resolver reads
    ``bridge_txn_status`` after ``max-txn-timeout`` and settles the transaction.
    """


class DdlNotLogged(ProducerError):
    """A DDL took effect upstream but its binlog could not be written.

    Consumers will not see the change; the writer refuses DML on the table
    (:class:`SchemaDrift`) until an operator reconciles it.
    """

"""The bridge's exceptions, in one tree.

::

    BridgeError                    base; ``retriable`` says whether retrying can help
    ├── ConfigError                invalid configuration; names the key
    ├── ProtocolError              a malformed payload or message
    ├── ClusterMismatch            a request carried another cluster's id
    ├── Unreachable                a dependency did not answer (retriable; the CLI exits 3)
    ├── MetaError                  the meta service (TSO + registry)
    │   ├── MetaUnavailable        no member answered (retriable; also an Unreachable)
    │   ├── NotLeader              this member is not the leader (retriable)
    │   ├── NodeIdTaken            another live node holds the node id (also a UserError)
    │   └── StoreError             the backing store failed (local files, etcd)
    │       └── StoreUnavailable   no etcd endpoint answered (also an Unreachable)
    ├── DatabaseError              a MySQL server refused a statement (``code``: its error number)
    │   └── DatabaseUnavailable    unreachable, read-only, killed, busy: another try may pass (retriable)
    └── PumpError                  writing binlogs to pumps
        ├── PumpUnavailable        one pump did not answer (retriable)
        ├── PumpRejected           a pump answered with an error message
        │   └── CommitRefused      a Commit the pump will not deliver (final)
        └── NoPumpAvailable        no pump took the binlog within the timeout

Third-party exceptions (grpc, aetcd, pymysql in :mod:`bridge.mysql`, OSError) are translated into this tree at
the adapter that calls them, with ``raise ... from exc``. ``UserError``
subclasses are the user's to fix: the CLI prints their message without a
traceback. An :class:`Unreachable` (a service, broker or database that did not
answer) makes the CLI exit 3, a UserError 2, any other BridgeError 1
(docs/operations.md, "Exit status and error lines").
"""

from __future__ import annotations

from typing import ClassVar


class BridgeError(Exception):
    """Base of every error the bridge raises on purpose."""

    retriable: ClassVar[bool] = False


class UserError(BridgeError):
    """An error caused by input the user controls (config, flags, data)."""


class ConfigError(UserError):
    """A configuration file or flag is invalid. The message names the key."""


class ProtocolError(BridgeError):
    """A payload or message could not be decoded."""


class ClusterMismatch(UserError):
    """A request carried a cluster id other than this cluster's."""


class Unreachable(BridgeError):
    """A service the command depends on (meta, etcd, broker, database, pump, registry) did not answer."""

    retriable = True


class MetaError(BridgeError):
    """The meta service could not do what was asked."""


class MetaUnavailable(MetaError, Unreachable):
    """No meta service member answered."""

    retriable = True


class NodeIdTaken(MetaError, UserError):
    """The registry refused a heartbeat: another node, alive within its lease, holds the node id.

    The message names the holder's address. Node ids must be unique; the
    holder loses the id only when it has been silent for longer than its lease.
    """


class NotLeader(MetaError):
    """The member asked is not the leader; ``leader_addr`` names it when known."""

    retriable = True

    def __init__(self, message: str, leader_addr: str = "") -> None:
        super().__init__(message)
        self.leader_addr = leader_addr


class StoreError(MetaError):
    """The meta service's backing store (data dir or etcd) failed."""


class DatabaseError(BridgeError):
    """A MySQL-compatible server (or the connection to it) failed a statement.
    ``code`` is the server's or client's error number, 0 when there is none."""

    def __init__(self, message: str, *, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class DatabaseUnavailable(DatabaseError):
    """The server could not be reached, the connection broke or was killed, the server is
    read-only or busy: a fresh connection and another try may pass (``bridge.mysql.RETRIABLE_CODES``)."""

    retriable = True


class StoreUnavailable(StoreError, Unreachable):
    """No endpoint of the backing store (etcd) answered."""


class PumpError(BridgeError):
    """Writing a binlog to the pump cluster failed."""


class PumpUnavailable(PumpError, Unreachable):
    """One pump did not answer."""

    retriable = True


class PumpRejected(PumpError):
    """A pump answered the write with an error message."""


class BinlogTooLarge(PumpRejected):
    """The binlog is over the pump's (or this client's) message size limit; sending it again cannot help."""


class CommitRefused(PumpRejected):
    """The pump refused a Commit it would not deliver: the lost-commit resolver already
    settled its Prewrite, or the pump's watermark passed its commit_ts. No other pump
    holds the Prewrite, so sending it elsewhere or again cannot help."""


class NoPumpAvailable(PumpError, Unreachable):
    """No pump accepted the binlog within the configured timeout."""


def skip_hint(commit_ts: int) -> str:
    """How an operator skips the transaction at ``commit_ts`` (ends every halting error)."""
    return (
        f"to skip this transaction, add {commit_ts} to [filter] ignore-txn-commit-ts "
        f"(or the line commit-ts = [[{commit_ts}, {commit_ts}]] under [skip]) "
        "in the drainer's config and restart it"
    )

"""The capture's exceptions (``bridge.errors`` tree)::

    CaptureError                  (bridge.errors.BridgeError)
    ├── UpstreamNotReady          the server is not a usable binlog source; names the variable and the fix
    ├── PositionLost              the stored position is no longer in the server's binlogs
    ├── SchemaMismatch            a row event's columns differ from the table schema being tracked
    └── SourceUnavailable         the replication connection failed (retriable)

Errors of the producer's code the capture reuses (``UnsupportedSchema``,
``UpstreamError``) and of the pump client pass through unchanged.
"""

from __future__ import annotations

from bridge.errors import BridgeError, Unreachable, UserError


class CaptureError(BridgeError):
    """Capturing the upstream's binlog failed."""


class UpstreamNotReady(CaptureError, UserError):
    """A server variable or privilege the capture needs is missing; the message says how to fix it."""


class PositionLost(CaptureError, UserError):
    """The position to resume from was purged from the server's binlogs."""


class SchemaMismatch(CaptureError, UserError):
    """Rows arrived whose columns differ from the schema the capture tracks for their table."""


class SourceUnavailable(CaptureError, Unreachable):
    """The connection to the upstream broke or could not be opened."""

    retriable = True

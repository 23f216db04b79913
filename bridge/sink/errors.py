"""Errors a sink raises, in :mod:`bridge.errors`' tree.

::

    BridgeError
    └── SinkError                 a sink could not deliver events
        ├── SinkUnavailable       the downstream is busy or unreachable for now (retriable)
        ├── SinkApplyError        the downstream refused a change; retrying cannot help
        └── SinkCheckFailed       the pre-flight check (Sink.check) found the downstream unusable

:class:`SinkApplyError` is also a :class:`~bridge.errors.UserError`: the cure
is in the downstream or the data (a missing table, a constraint), and its
message names the table, the commit_ts and the statement's shape — SQL text
with placeholders, never values. Sinks translate their driver's exceptions
into these at one place each, with ``raise ... from exc``.
"""

from __future__ import annotations

from bridge.errors import BridgeError, Unreachable, UserError


class SinkError(BridgeError):
    """A sink could not deliver events."""


class SinkUnavailable(SinkError, Unreachable):
    """The downstream is busy or unreachable; the same events may be written again."""

    retriable = True


class SinkApplyError(SinkError, UserError):
    """The downstream refused a change; the message names table, commit_ts and statement shape."""


class SinkCheckFailed(SinkError, UserError):
    """:meth:`bridge.sink.contract.Sink.check` found the downstream unusable as configured (address,
    login, privileges, broker): one line saying what failed and where, no secrets."""

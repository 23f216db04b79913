"""What every lost-commit resolver shares: its protocol and its errors.

The resolvers (:mod:`pump.resolver`'s MySQL one, :mod:`pump.resolver_sqlite`)
import this module; :func:`pump.resolver.build_resolver` picks one.
"""

from __future__ import annotations

from typing import Protocol

from bridge.errors import BridgeError


class ResolverError(BridgeError):
    """The resolver could not tell whether a transaction committed."""


class ResolverUnavailable(ResolverError):
    """The upstream did not answer; asking again later may succeed."""

    retriable = True


class StatusTableMissing(ResolverError):
    """The status table (or its database) does not exist upstream."""


class LostCommitResolver(Protocol):
    """Tells whether the upstream committed the transaction that began at ``start_ts``."""

    name: str  # names it in logs and in the refusal of a late Commit, e.g. 'resolver "mysql" (dsn)'

    async def resolve(self, start_ts: int) -> int | None:
        """The commit_ts if the transaction committed, None if it did not.

        Raises :class:`ResolverError` when it cannot tell; ``retriable`` says
        whether asking again later may help. Never returns None on doubt.
        """
        ...

    async def close(self) -> None: ...

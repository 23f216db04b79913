"""Timestamp layout shared by every component: physical ms << 18 | logical.

The same layout as PD's TSO, so a timestamp converts to wall-clock time by
shifting, and 2**18 timestamps can be handed out per millisecond.
"""

from __future__ import annotations

from datetime import UTC, datetime

PHYSICAL_SHIFT = 18
MAX_LOGICAL = 1 << PHYSICAL_SHIFT  # logical values are 0 .. MAX_LOGICAL - 1


def compose(physical_ms: int, logical: int) -> int:
    return (physical_ms << PHYSICAL_SHIFT) | logical


def physical_ms(ts: int) -> int:
    return ts >> PHYSICAL_SHIFT


def logical(ts: int) -> int:
    return ts & (MAX_LOGICAL - 1)


def to_datetime(ts: int) -> datetime:
    """The UTC wall-clock time a timestamp was allocated at."""
    return datetime.fromtimestamp(physical_ms(ts) / 1000, tz=UTC)

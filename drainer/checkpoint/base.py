"""The checkpoint: how far the downstream is durable, and the schema that holds there.

A :class:`CheckpointState` is a commit_ts (every transaction at or below it
is durable in the sink: it is a position ``sink.flush()`` returned) and the
schema tracker's snapshot valid at that commit_ts. A drainer starts from it:
it pulls every pump after ``commit_ts`` and decodes rows with that schema.

An implementation stores one state per drainer and replaces it atomically:
after a crash, :meth:`Checkpoint.load` returns either the old or the new
state, never a mix. ``consistent`` is True only when saved by a clean stop
(the original's flag: the downstream was left at exactly this position).

Implementations are built by name from the ``[checkpoint]`` table
(:mod:`drainer.checkpoint`): ``factory(options, data_dir, cluster_id)``,
where ``options`` is that table without ``type``. They raise
:class:`CheckpointError` (a ``retriable`` one when trying again may help)
and :class:`bridge.errors.ConfigError` naming ``checkpoint.<key>`` for bad
options. One that retries may define ``interrupt()`` (see :func:`interrupt`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bridge.errors import BridgeError


class CheckpointError(BridgeError):
    """A checkpoint could not be read or written."""


class RetriableCheckpointError(CheckpointError):
    """Saving failed in a way that may pass (a downstream connection dropped)."""

    retriable = True


@dataclass(frozen=True)
class CheckpointState:
    commit_ts: int
    schema: bytes = field(default=b"", repr=False)
    consistent: bool = False


class Checkpoint(Protocol):
    """Where a drainer keeps its :class:`CheckpointState`. Used from one thread at a time."""

    def describe(self) -> str:
        """Where the checkpoint lives, for logs (no secrets)."""
        ...

    def load(self) -> CheckpointState | None:
        """The saved state, or None when this drainer never saved one."""
        ...

    def save(self, state: CheckpointState) -> None:
        """Replace the saved state durably and atomically."""
        ...

    def close(self) -> None: ...


def interrupt(checkpoint: Checkpoint) -> None:
    """Tell ``checkpoint`` the drainer is stopping: a save or load being retried stops retrying
    (one more attempt at most, then :class:`RetriableCheckpointError`), so SIGTERM is not held
    up by an unreachable target. Safe from any thread; a checkpoint without retries ignores it.
    """
    stop = getattr(checkpoint, "interrupt", None)
    if callable(stop):
        stop()


class CheckpointFactory(Protocol):
    def __call__(self, options: Mapping[str, Any], data_dir: Path, cluster_id: int) -> Checkpoint: ...

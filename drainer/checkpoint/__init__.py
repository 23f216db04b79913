"""Checkpoints: where a drainer records how far its sink is durable (see :mod:`.base`).

Built by name from the ``[checkpoint]`` table: ``type`` picks an entry point of
the group ``binlog_bridge.checkpoints`` (pyproject.toml: ``name = "module:callable"``,
imported only when used), the rest of the table goes to it as ``options``. A new
checkpoint is one module and one line there, as a sink is.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, cast

from bridge.errors import ConfigError
from drainer.checkpoint.base import (
    Checkpoint,
    CheckpointError,
    CheckpointFactory,
    CheckpointState,
    RetriableCheckpointError,
    interrupt,
)

__all__ = [
    "GROUP",
    "Checkpoint",
    "CheckpointError",
    "CheckpointState",
    "RetriableCheckpointError",
    "build_checkpoint",
    "interrupt",
]

GROUP = "binlog_bridge.checkpoints"


def build_checkpoint(table: Mapping[str, Any], data_dir: Path, cluster_id: int) -> Checkpoint:
    """The checkpoint the ``[checkpoint]`` table describes (``type`` defaults to ``file``)."""
    options = dict(table)
    name = options.pop("type", "file")
    registered = {entry.name: entry for entry in entry_points(group=GROUP)}
    target = registered.get(name) if isinstance(name, str) else None
    if target is None:
        known = ", ".join(sorted(registered))
        raise ConfigError(f"checkpoint.type: expected one of {known}, got {name!r}")
    factory: Any = target.load()
    return cast(CheckpointFactory, factory)(options, data_dir, cluster_id)

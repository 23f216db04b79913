"""Checkpoints: where a drainer records how far its sink is durable (see :mod:`.base`).

Built by name from the ``[checkpoint]`` table: ``type`` picks an entry of
:data:`CHECKPOINTS` (``"module:callable"``, imported only when used), the
rest of the table goes to it as ``options``. The MySQL checkpoint adds its
entry here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
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
    "CHECKPOINTS",
    "Checkpoint",
    "CheckpointError",
    "CheckpointState",
    "RetriableCheckpointError",
    "build_checkpoint",
    "interrupt",
]

CHECKPOINTS: dict[str, str] = {
    "file": "drainer.checkpoint.file:FileCheckpoint.from_options",
    "mysql": "drainer.checkpoint.mysql:MySQLCheckpoint.from_options",
}


def build_checkpoint(table: Mapping[str, Any], data_dir: Path, cluster_id: int) -> Checkpoint:
    """The checkpoint the ``[checkpoint]`` table describes (``type`` defaults to ``file``)."""
    options = dict(table)
    name = options.pop("type", "file")
    target = CHECKPOINTS.get(name) if isinstance(name, str) else None
    if target is None:
        known = ", ".join(sorted(CHECKPOINTS))
        raise ConfigError(f"checkpoint.type: expected one of {known}, got {name!r}")
    module_name, _, attr_path = target.partition(":")
    factory: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        factory = getattr(factory, attr)
    return cast(CheckpointFactory, factory)(options, data_dir, cluster_id)

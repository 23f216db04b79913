"""The file checkpoint: one JSON file in the drainer's data dir.

::

    {"clusterID": 6982..., "commitTS": 4521..., "consistent": false,
     "ts-map": {}, "schema": "<base64 of the schema tracker's snapshot>"}

The keys are the original drainer's checkpoint JSON plus ``clusterID`` and
``schema``. A save writes ``<path>.tmp``, fsyncs it, renames it over
``<path>`` and fsyncs the directory, so a crash leaves the old or the new
file. A lock file (``<path>.lock``, ``flock``) keeps a second drainer off
the same checkpoint. A checkpoint of another cluster, or one that cannot be
read, stops the drainer: starting over from ``initial-commit-ts`` instead
would silently replay or skip data.

Options (``[checkpoint]`` with ``type = "file"``): ``path``, default
``checkpoint.json`` in data-dir (a relative path is taken from data-dir).
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.durable import write_atomically
from bridge.errors import ConfigError
from drainer.checkpoint.base import CheckpointError, CheckpointState

log = logging.getLogger(__name__)

DEFAULT_NAME = "checkpoint.json"


class FileCheckpoint:
    """A :class:`~drainer.checkpoint.base.Checkpoint` in a local JSON file."""

    def __init__(self, path: Path, cluster_id: int = 0) -> None:
        self.path = path
        self.cluster_id = cluster_id
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._lock = (path.parent / f"{path.name}.lock").open("a")
        except OSError as exc:
            raise CheckpointError(f"checkpoint {path}: cannot create: {exc.strerror}") from exc
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise CheckpointError(f"checkpoint {path}: another drainer is using it") from None

    @classmethod
    def from_options(cls, options: Mapping[str, Any], data_dir: Path, cluster_id: int) -> FileCheckpoint:
        unknown = sorted(set(options) - {"path"})
        if unknown:
            raise ConfigError(f"checkpoint.{unknown[0]}: unknown key for a file checkpoint (keys: path)")
        path = options.get("path", DEFAULT_NAME)
        if not isinstance(path, str) or not path:
            raise ConfigError(f"checkpoint.path: expected a file path, got {path!r}")
        return cls(data_dir / path, cluster_id)

    def describe(self) -> str:
        return f"file {self.path}"

    def load(self) -> CheckpointState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"checkpoint {self.path}: cannot read: {exc}") from exc
        try:
            data = json.loads(text)
            state = CheckpointState(
                commit_ts=_int(data["commitTS"]),
                schema=base64.b64decode(data.get("schema", ""), validate=True),
                consistent=bool(data.get("consistent", False)),
            )
            cluster_id = _int(data.get("clusterID", 0))
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise CheckpointError(f"checkpoint {self.path}: not a drainer checkpoint: {exc!r}") from None
        if self.cluster_id and cluster_id and cluster_id != self.cluster_id:
            raise CheckpointError(
                f"checkpoint {self.path} belongs to cluster {cluster_id}, this is cluster {self.cluster_id}"
            )
        return state

    def save(self, state: CheckpointState) -> None:
        data = {
            "clusterID": self.cluster_id,
            "commitTS": state.commit_ts,
            "consistent": state.consistent,
            "ts-map": {},
            "schema": base64.b64encode(state.schema).decode("ascii"),
        }
        try:
            write_atomically(self.path, json.dumps(data, separators=(",", ":")).encode())
        except OSError as exc:
            raise CheckpointError(f"checkpoint {self.path}: cannot save: {exc.strerror}") from exc
        log.debug("checkpoint saved at commit_ts %d", state.commit_ts)

    def close(self) -> None:
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value

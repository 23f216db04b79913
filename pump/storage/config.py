"""``StorageConfig``: the ``[storage]`` table of a pump's TOML file.

::

    [storage]
    segment-size = 524288000         # bytes; a value-log segment is sealed past this
    sync = true                      # fsync every group commit; false only for benchmarks
    index-sync = true                # fdatasync every index commit (consistent after a machine crash)
    index-map-size = 68719476736     # LMDB address space reserved for the index (sparse)
    max-batch-bytes = 16777216       # most payload bytes appended per group commit
    index-queue-batches = 64         # written batches handed to the indexer in memory
    index-ack-wait = "1s"            # longest an acknowledgement waits for the index
    orphan-commit-timeout = "10s"    # how long a Commit may wait for its Prewrite
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bridge.errors import ConfigError

MIB = 1024 * 1024


def _duration(default: float, help_text: str) -> float:
    return field(default=default, metadata={"duration": True, "help": help_text})


@dataclass
class StorageConfig:
    """How the pump stores binlogs: value log, index and group commit."""

    segment_size: int = field(
        default=500 * MIB, metadata={"help": "value-log segment size in bytes before it is sealed"}
    )
    sync: bool = field(
        default=True,
        metadata={"help": "fsync the value log before acknowledging; false loses data on a crash"},
    )
    index_sync: bool = field(
        default=True,
        metadata={"help": "fdatasync index commits so a machine crash leaves a consistent index"},
    )
    index_map_size: int = field(
        default=64 * 1024 * MIB, metadata={"help": "bytes of address space reserved for the LMDB index"}
    )
    max_batch_bytes: int = field(
        default=16 * MIB, metadata={"help": "most payload bytes appended and fsynced as one group commit"}
    )
    index_queue_batches: int = field(
        default=64,
        metadata={"help": "batches queued for the indexer in memory; past this it re-reads the log"},
    )
    index_ack_wait: float = _duration(
        1.0, "how long an acknowledgement waits for the index once the value log is fsynced"
    )
    orphan_commit_timeout: float = _duration(
        10.0, "how long (in commit_ts time) a Commit without a known Prewrite is kept pending"
    )

    def validate(self) -> None:
        if self.segment_size < 4096:
            raise ConfigError(f"storage.segment-size: expected at least 4096 bytes, got {self.segment_size}")
        if self.index_map_size < 16 * MIB:
            raise ConfigError(
                f"storage.index-map-size: expected at least {16 * MIB} bytes, got {self.index_map_size}"
            )
        if self.max_batch_bytes < 1:
            raise ConfigError(
                f"storage.max-batch-bytes: expected a positive size, got {self.max_batch_bytes}"
            )
        if self.index_queue_batches < 1:
            raise ConfigError(
                f"storage.index-queue-batches: expected at least 1, got {self.index_queue_batches}"
            )
        if self.index_ack_wait > 60:
            raise ConfigError(f"storage.index-ack-wait: expected at most 60s, got {self.index_ack_wait:g}s")

"""The layout of a sharded change index, and reading it as one.

::

    INDEX/shards.json      {"format": 2, "shards": N, "placement": P}   written once, at creation
    INDEX/shard-0000/      a ChangeIndex: tantivy files, its floors.json and tables.json
    ...
    INDEX/shard-<N-1>/

Where a document lives is the index's **placement**, recorded at creation:

- ``hash`` (``--index-mode shuffle``): shard ``id_hash(key) % N`` of its key part (BLAKE2b, the
  same in every process: never Python's salted ``hash``);
- ``kafka-partition`` (``--index-mode direct``): shard i holds the documents of partition i of
  the table topics (the Kafka sink partitions by key: CRC-32 of the key's Avro body modulo the
  partition count), so N is the topics' partition count and each shard task reads its own
  partitions.

Either way a renamed table's documents keep their shard, so each shard moves its own. N is
fixed when the index is created; a job started later with another setting keeps the recorded N.

Each shard keeps its own floors and table columns: every shard task of a
micro-batch receives all of the batch's DDL rows, so each shard's files are
complete for that shard, and a reader takes the union of floors and the newest
columns per table over the shards.

A folder holding a tantivy index directly is an index written by the
single-writer job of earlier versions: it is read, and written, as one shard.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import tantivy

from bridge.errors import UserError
from spark_consumers.index.documents import id_hash
from spark_consumers.index.store import FLOORS_FILE, table_columns

log = logging.getLogger(__name__)

META_FILE = "shards.json"
FORMAT = 2
PLACEMENTS = ("hash", "kafka-partition")
MODE_OF = {"hash": "shuffle", "kafka-partition": "direct"}


def shard_dir(path: Path, shard: int) -> Path:
    return path / f"shard-{shard:04d}"


def shard_of(key: str, shards: int) -> int:
    """The shard of a document with key part ``key`` in an index of ``shards`` shards."""
    return id_hash(key) % shards if shards > 1 else 0


def has_index(folder: Path) -> bool:
    """A tantivy index in ``folder`` (tantivy's own check raises on a folder that does not exist)."""
    return folder.is_dir() and bool(tantivy.Index.exists(str(folder)))


def _recorded(path: Path) -> int | None:
    meta = path / META_FILE
    if not meta.exists():
        return None
    data = json.loads(meta.read_text())
    if data.get("format") == FORMAT and data.get("shards") is None and data.get("placement"):
        return None  # pending: a direct-mode index whose first batch will record its shards
    if data.get("format") != FORMAT or int(data.get("shards", 0)) < 1:
        raise UserError(f"--index {path}: {META_FILE} of an unknown format: {data}")
    return int(data["shards"])


def create_pending(path: Path, placement: str) -> None:
    """An index whose shard count is not known yet (the direct mode started before any table
    topic exists: the first batch that reads one records it); readers find it empty meanwhile."""
    if (path / META_FILE).exists() or is_single_writer_index(path):
        return
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / (META_FILE + ".tmp")
    tmp.write_text(json.dumps({"format": FORMAT, "shards": None, "placement": placement}))
    os.replace(tmp, path / META_FILE)


def placement_of(path: Path) -> str | None:
    """The recorded placement of the index at ``path`` (``hash`` for an index created before it
    was recorded), or None when there is no ``shards.json``."""
    meta = path / META_FILE
    if not meta.exists():
        return None
    return str(json.loads(meta.read_text()).get("placement", "hash"))


def recorded_shards(path: Path) -> int | None:
    """The recorded shard count of the index at ``path``, or None."""
    return _recorded(path)


def is_single_writer_index(path: Path) -> bool:
    """An index of the single-writer job: tantivy's own files directly in ``path``."""
    return not (path / META_FILE).exists() and has_index(path)


def create_or_open(path: Path, shards: int, placement: str = "hash") -> list[Path]:
    """The shard folders of the index at ``path`` for writing; created with ``shards`` shards and
    ``placement`` when there is no index yet. The driver calls this once, before any shard task
    runs. An index of another placement is refused (its documents are elsewhere)."""
    if is_single_writer_index(path):
        if placement != "hash":
            raise UserError(
                f"--index {path}: an index of the single-writer job can only be written with "
                "--index-mode shuffle; or delete the index folder and the checkpoint and run again"
            )
        log.warning("%s: an index of the single-writer job; written as one shard", path)
        return [path]
    recorded = _recorded(path)
    held = placement_of(path)
    if held is not None and held != placement:
        raise UserError(
            f"--index {path}: created by --index-mode {MODE_OF.get(held, held)} (documents placed "
            f"by {held}); run with --index-mode {MODE_OF.get(held, held)}, or delete the index "
            "folder and the checkpoint and run again"
        )
    if recorded is None:
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / (META_FILE + ".tmp")
        tmp.write_text(json.dumps({"format": FORMAT, "shards": shards, "placement": placement}))
        os.replace(tmp, path / META_FILE)
        recorded = shards
    elif recorded != shards:
        log.info("%s: %d shards, as created (not %d)", path, recorded, shards)
    return [shard_dir(path, i) for i in range(recorded)]


def shard_paths(path: Path) -> list[Path]:
    """The shard folders of an existing index, for reading; a clear error when there is none."""
    if is_single_writer_index(path):
        return [path]
    recorded = _recorded(path)
    if recorded is None:
        if (path / META_FILE).exists():
            return []  # pending (create_pending): no shard yet
        raise UserError(f"--index {path}: no index there (run the index job first)")
    return [shard_dir(path, i) for i in range(recorded)]


def open_shards(path: Path) -> list[tantivy.Index]:
    """Every shard of the index at ``path``, opened and reloaded (a shard no task wrote yet is
    skipped: it has no documents)."""
    out = []
    for folder in shard_paths(path):
        if has_index(folder):
            index = tantivy.Index.open(str(folder))
            index.reload()
            out.append(index)
    return out


def merged_floors(path: Path) -> list[dict[str, Any]]:
    """The floors of every shard (each dict: db, table, ts, pos), without repeats."""
    seen: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    for folder in shard_paths(path):
        file = folder / FLOORS_FILE
        for floor in json.loads(file.read_text()) if file.exists() else []:
            seen[(floor["db"], floor["table"], floor["ts"], floor["pos"])] = floor
    return list(seen.values())


def merged_columns(path: Path) -> dict[str, dict[str, Any]]:
    """table -> {"kinds", "ts", "pos"}: the newest schema version any shard saw of each table."""
    out: dict[str, dict[str, Any]] = {}
    for folder in shard_paths(path):
        for table, held in table_columns(folder).items():
            mine = out.get(table)
            if mine is None or (mine["ts"], mine["pos"]) < (held["ts"], held["pos"]):
                out[table] = held
    return out

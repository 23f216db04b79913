"""The table-independent Avro schemas (``schemas/avro/*.avsc``) and the DDL event record.

``SOURCE_SCHEMA`` (``bridge.Source``) is embedded in every table's envelope;
``DDL_SCHEMA`` (``bridge.DDLEvent``) is the value schema of the DDL topic.
The files are read from ``schemas/avro/`` of the source tree the package
runs from (``pip install -e .``), or else from the copy a wheel installs
under ``<prefix>/share/binlog-bridge/avro`` (pyproject's ``data-files``: the
Docker images): the ``.avsc`` files are the published contract and the code
uses exactly them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bridge import tso
from bridge.proto import row_pb2


def _schema_dir() -> Path:
    source_tree = Path(__file__).resolve().parents[2] / "schemas" / "avro"
    if source_tree.is_dir():
        return source_tree
    return Path(sys.prefix) / "share" / "binlog-bridge" / "avro"


SCHEMA_DIR = _schema_dir()


def load_schema(name: str) -> dict[str, Any]:
    """Parse ``schemas/avro/<name>.avsc``; raises FileNotFoundError naming the path when missing."""
    path = SCHEMA_DIR / f"{name}.avsc"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"Avro schema file {path} is missing: bridge.avro loads schemas/avro/ from the source "
            "tree it is installed from (pip install -e .) or from a wheel's share/binlog-bridge/avro"
        ) from None
    schema = json.loads(text)
    if not isinstance(schema, dict):
        raise ValueError(f"{path}: expected a JSON object (an Avro record schema)")
    return schema


SOURCE_SCHEMA: dict[str, Any] = load_schema("source")
DDL_SCHEMA: dict[str, Any] = load_schema("ddl_event")


def source_record(
    *, cluster_id: int, db: str, table: str, start_ts: int, commit_ts: int, pos: int, last: bool
) -> dict[str, Any]:
    """A ``bridge.Source`` record for one row change (see ``schemas/avro/source.avsc``)."""
    return {
        "cluster_id": cluster_id,
        "db": db,
        "table": table,
        "start_ts": start_ts,
        "commit_ts": commit_ts,
        "pos": pos,
        "last": last,
    }


def ddl_record(
    change: row_pb2.SchemaChange,
    *,
    cluster_id: int,
    start_ts: int,
    commit_ts: int,
    query: str,
    topic: str,
) -> dict[str, Any]:
    """The ``bridge.DDLEvent`` record of one DDL.

    ``topic`` is the table's topic ("" for database DDL); ``table_schema``
    holds the serialized ``TableSchema`` the DDL leaves behind, empty when
    the change carries none (drops, database DDL).
    """
    schema = change.table_schema.SerializeToString() if change.HasField("table_schema") else b""
    return {
        "cluster_id": cluster_id,
        "start_ts": start_ts,
        "commit_ts": commit_ts,
        "ts_ms": tso.physical_ms(commit_ts),
        "db": change.db,
        "table": change.table,
        "kind": row_pb2.SchemaChange.Kind.Name(change.kind),
        "query": query,
        "old_db": change.old_db,
        "old_table": change.old_table,
        "topic": topic,
        "table_schema": schema,
    }

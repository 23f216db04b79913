"""The change index and the Parquet snapshot as sides of ``bridge.diff`` (its ``Source`` protocol),
so they are compared with the upstream by the same normalization and chunked comparison as every
other downstream."""

from __future__ import annotations

import base64
import importlib
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import tantivy

from spark_consumers.index import search
from spark_consumers.index.shards import merged_columns, merged_floors

# our kinds -> bridge.diff's kinds (bool has none: MySQL's BOOL is TINYINT)
DIFF_KINDS = {
    "int": "int",
    "double": "double",
    "bool": "int",
    "decimal": "decimal",
    "date": "date",
    "datetime": "datetime",
    "timestamp": "timestamp",
    "time": "time",
    "string": "text",
    "json": "json",
    "bytes": "binary",
}


def diff_module(name: str) -> Any:
    """``bridge.apps.diff.<name>`` (or ``bridge.diff.<name>`` before the apps/ refactor landed)."""
    try:
        return importlib.import_module(f"bridge.apps.diff.{name}" if name else "bridge.apps.diff")
    except ImportError:
        return importlib.import_module(f"bridge.diff.{name}" if name else "bridge.diff")


def _from_index(value: Any, kind: str) -> Any:
    """A ``row`` JSON leaf back in the JSON image form (what the change rows carry)."""
    if isinstance(value, datetime):
        if kind == "date":
            return value.date().isoformat()
        if kind == "datetime":
            return value.replace(tzinfo=None).isoformat()
        return value.astimezone(UTC).isoformat()
    if kind == "bytes" and isinstance(value, str):
        return base64.b64decode(value)
    return value


class _KeyFilter:
    @staticmethod
    def keep(row: dict[str, Any], where: Any) -> bool:
        if where is None:
            return True
        key = tuple(row.get(c) for c in where.columns)
        return (where.low is None or key >= tuple(where.low)) and (
            where.high is None or key < tuple(where.high)
        )


class IndexSource(_KeyFilter):
    """The live documents of a change index, one table per ``_table``; columns from the documents."""

    def __init__(self, path: Path) -> None:
        self.label = f"index:{path}"
        self.path = path
        self.shards = search.open_existing(path)
        self._rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._kinds: dict[tuple[str, str], dict[str, str]] = {}
        self._load()

    def _load(self) -> None:
        """Tables and columns from ``tables.json`` (the newest schema version of each; a table
        dropped since, by a floor above it, is gone); rows from the live documents."""
        floors = merged_floors(self.path)
        for name, held in merged_columns(self.path).items():
            db, _, table = name.partition(".")
            gone = [f for f in floors if f["db"] == db and f["table"] in ("", table)]
            if not any((f["ts"], f["pos"]) > (held["ts"], held["pos"]) for f in gone):
                self._kinds[(db, table)] = dict(held["kinds"])
        for index in self.shards:
            searcher = index.searcher()
            live = tantivy.Query.term_query(index.schema, "_live", True)
            for _, address in searcher.search(live, limit=max(search.live_documents(index), 1)).hits:
                doc = searcher.doc(address).to_dict()
                db, _, table = doc["_table"][0].partition(".")
                row = (doc.get("row") or [{}])[0]
                kinds = self._kinds.get((db, table), {})
                self._rows.setdefault((db, table), []).append(
                    {c: _from_index(row.get(c), k) for c, k in kinds.items()}
                )

    def tables(self) -> list[tuple[str, str]]:
        return sorted(self._kinds)

    def table_info(self, db: str, table: str) -> Any:
        sources = diff_module("sources")
        columns = tuple(
            sources.Column(c, DIFF_KINDS.get(k, "text"), True) for c, k in self._kinds[(db, table)].items()
        )
        return sources.TableInfo(db, table, columns, ())

    def rows(
        self, db: str, table: str, columns: Sequence[str], where: Any = None
    ) -> Iterator[tuple[Any, ...]]:
        for row in self._rows.get((db, table), []):
            if self.keep(row, where):
                yield tuple(row.get(c) for c in columns)

    def close(self) -> None:
        pass


class SnapshotSource(_KeyFilter):
    """The snapshot folder: ``<db>.<table>/rows.parquet`` per table."""

    def __init__(self, path: Path) -> None:
        self.label = f"snapshot:{path}"
        self.path = path

    def tables(self) -> list[tuple[str, str]]:
        found = [p.parent.name.partition(".") for p in sorted(self.path.glob("*/rows.parquet"))]
        return [(db, table) for db, _, table in found]

    def _kinds(self, db: str, table: str) -> dict[str, str]:
        return dict(json.loads((self.path / f"{db}.{table}" / "columns.json").read_text())["kinds"])

    def table_info(self, db: str, table: str) -> Any:
        sources = diff_module("sources")
        kinds = self._kinds(db, table)
        columns = tuple(sources.Column(c, DIFF_KINDS.get(k, "text"), True) for c, k in kinds.items())
        return sources.TableInfo(db, table, columns, ())

    def rows(
        self, db: str, table: str, columns: Sequence[str], where: Any = None
    ) -> Iterator[tuple[Any, ...]]:
        data = pq.read_table(self.path / f"{db}.{table}" / "rows.parquet").to_pylist()
        for row in data:
            if self.keep(row, where):
                yield tuple(_parquet_value(row.get(c)) for c in columns)

    def close(self) -> None:
        pass


def _parquet_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return value


def assert_equal_to_upstream(upstream: str, downstream: Any, tables: set[str]) -> Any:
    """``bridge.diff`` of ``upstream`` (a DSN) and ``downstream`` (a Source): every upstream table
    among ``tables`` present and equal; tables only downstream (dropped upstream) must be empty."""
    diff = diff_module("")
    up = diff.open_source(upstream, "--upstream")
    try:
        report = diff.diff_sources(up, downstream)
    finally:
        up.close()
    compared = {t.name.split(".", 1)[1]: t for t in report.tables}
    assert set(compared) >= tables, report.lines()
    for name, table in compared.items():
        if table.only_on == "downstream":
            db, _, short = table.name.partition(".")
            assert not list(downstream.rows(db, short, [])), f"{name}: dropped upstream, rows left downstream"
            continue
        assert table.equal, "\n".join(report.lines())
    return report

"""Queries over a change index: ``search`` (JSON lines with the score) and ``stats``.

Both read every shard (:mod:`spark_consumers.index.shards`) and merge: the
best hits of each shard, then the best of those by score; counts summed.

Only live documents are searched (tombstones of deleted rows never match).
A query is tantivy's query language over the full-text field ``text`` by
default; ``row.<column>:value`` filters on a column (``row.status:paid``,
``row.amount:>10``, ``row.placed:[2024-01-01T00:00:00Z TO *]``).
"""

from __future__ import annotations

import heapq
import json
import time
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

import tantivy

from bridge import tso
from bridge.errors import UserError
from spark_consumers.index.shards import open_shards


def open_existing(path: Path) -> list[tantivy.Index]:
    """Every shard of the index at ``path``; a :class:`UserError` when there is no index."""
    return open_shards(path)


def _live(index: tantivy.Index) -> tantivy.Query:
    return tantivy.Query.term_query(index.schema, "_live", True)


def live_documents(shards: tantivy.Index | Sequence[tantivy.Index]) -> int:
    total = 0
    for index in [shards] if isinstance(shards, tantivy.Index) else shards:
        index.reload()
        found = index.searcher().search(_live(index), limit=1, count=True)
        total += int(getattr(found, "count", 0) or 0)
    return total


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def hit(doc: dict[str, Any], score: float | None = None) -> dict[str, Any]:
    """A stored document as a JSON-able dict: id, table, key, commit_ts, position, row."""
    out: dict[str, Any] = {} if score is None else {"score": round(score, 4)}
    out |= {
        "id": doc["_id"][0],
        "table": doc["_table"][0],
        "key": doc["_key"][0],
        "commit_ts": doc["_ts"][0],
        "position": doc["_pos"][0],
        "row": _plain((doc.get("row") or [{}])[0]),
    }
    return out


def search(path: Path, text: str, table: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
    """The best ``limit`` live documents for ``text`` (optionally of one ``db.table``), best first,
    over every shard (each shard scores with its own term statistics)."""
    found: list[tuple[float, int, dict[str, Any]]] = []
    for index in open_existing(path):
        for score, doc in _search_shard(index, text, table, limit):
            found.append((score, len(found), doc))
    return [hit(doc, score) for score, _, doc in heapq.nlargest(limit, found, key=lambda f: (f[0], -f[1]))]


def _search_shard(
    index: tantivy.Index, text: str, table: str | None, limit: int
) -> list[tuple[float, dict[str, Any]]]:
    try:
        parsed = index.parse_query(text, ["text"])
    except ValueError as exc:
        raise UserError(f"query {text!r}: {exc}") from None
    clauses = [(tantivy.Occur.Must, parsed), (tantivy.Occur.Must, _live(index))]
    if table:
        clauses.append((tantivy.Occur.Must, tantivy.Query.term_query(index.schema, "_table", table)))
    searcher = index.searcher()
    try:
        result = searcher.search(tantivy.Query.boolean_query(clauses), limit=limit)
    except ValueError as exc:  # e.g. a range over a text leaf
        raise UserError(f"query {text!r}: {exc}") from None
    return [(score, searcher.doc(addr).to_dict()) for score, addr in result.hits]


def get(shards: Sequence[tantivy.Index], doc_id: str) -> dict[str, Any] | None:
    """The live document ``db/table/key`` (looked up in every shard), or None."""
    for index in shards:
        searcher = index.searcher()
        query = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tantivy.Query.term_query(index.schema, "_id", doc_id)),
                (tantivy.Occur.Must, _live(index)),
            ]
        )
        hits = searcher.search(query, limit=1).hits
        if hits:
            return hit(searcher.doc(hits[0][1]).to_dict())
    return None


def stats(path: Path) -> dict[str, Any]:
    """Documents per table, tombstones, the last commit_ts indexed and how old it is (all shards)."""
    tables: dict[str, int] = {}
    total = last_ts = 0
    agg = {"tables": {"terms": {"field": "_table", "size": 100_000}}}
    for index in open_existing(path):
        searcher = index.searcher()
        total += searcher.num_docs
        for bucket in searcher.aggregate(_live(index), agg)["tables"]["buckets"]:
            tables[bucket["key"]] = tables.get(bucket["key"], 0) + bucket["doc_count"]
        # ordered by the fast field, not a max aggregation: that goes through f64 and rounds a commit_ts
        newest = searcher.search(tantivy.Query.all_query(), limit=1, order_by_field="_ts").hits
        last_ts = max([last_ts, *(int(ts) for ts, _ in newest)])
    out: dict[str, Any] = {
        "documents": sum(tables.values()),
        "tombstones": total - sum(tables.values()),
        "tables": dict(sorted(tables.items())),
        "last_commit_ts": last_ts,
    }
    if last_ts:
        out["last_commit_time"] = tso.to_datetime(last_ts).isoformat()
        out["lag_seconds"] = round(time.time() - tso.physical_ms(last_ts) / 1000, 3)
    return out


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)

"""The query side of the Spark consumers without Spark: an index written by the store, read by
``python -m spark_consumers search`` and ``stats`` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from spark_consumers.index.store import ChangeIndex
from spark_consumers.latest import latest_per_document


def cli(*args: str) -> str:
    argv = [sys.executable, "-m", "spark_consumers", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout


def test_search_and_stats_commands_read_the_index(tmp_path: Path) -> None:
    """The query side alone (no Spark): an index written by the store, read by the CLI."""
    types = json.dumps({"id": "int", "title": "string", "price": "decimal"})
    rows = [
        {"op": "c", "db": "shop", "table": "items", "key": json.dumps({"id": i}), "before": None,
         "after": json.dumps({"id": i, "title": f"{'red bike' if i % 2 else 'car'} {i}", "price": "9"}),
         "types": types, "commit_ts": 100 + i, "position": 0}
        for i in range(10)
    ]  # fmt: skip
    store = ChangeIndex(tmp_path / "ix")
    store.apply(latest_per_document(rows))
    store.close()
    out = cli("search", "--index", str(tmp_path / "ix"), "bike", "--table", "shop.items", "--limit", "3")
    found = [json.loads(line) for line in out.splitlines()]
    assert len(found) == 3 and all("bike" in f["row"]["title"] and f["score"] > 0 for f in found), out
    summary = json.loads(cli("stats", "--index", str(tmp_path / "ix")))
    assert summary["tables"] == {"shop.items": 10} and summary["last_commit_ts"] == 109, summary

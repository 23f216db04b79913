"""The SQLite lost-commit resolver against a real upstream file, and through
the sweeper into the real storage engine."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from bridge.binlog import parse_binlog, prewrite
from bridge.config import build
from bridge.errors import ConfigError
from bridge.tso import compose
from pump.config import ResolverConfig
from pump.resolver import LostCommitSweeper, build_resolver
from pump.resolver_base import StatusTableMissing
from pump.resolver_sqlite import SQLiteStatusResolver
from pump.storage.storage import Storage
from tests.integration.test_resolver_mysql import pull_until


def upstream(path: Path, rows: dict[int, int]) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE bridge_txn_status (start_ts INTEGER PRIMARY KEY, commit_ts INTEGER NOT NULL)"
        )
        conn.executemany("INSERT INTO bridge_txn_status VALUES (?, ?)", rows.items())


def test_found_and_absent(tmp_path: Path) -> None:
    db = tmp_path / "up.db"
    upstream(db, {100: 150, 200: 260})

    async def lookups() -> list[int | None]:
        resolver = build_resolver(ResolverConfig(type="sqlite", dsn=f"sqlite:///{db}"))
        try:
            return [await resolver.resolve(ts) for ts in (100, 200, 300)]
        finally:
            await resolver.close()

    assert asyncio.run(lookups()) == [150, 260, None]


def test_missing_table_is_named(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()

    async def lookup() -> None:
        resolver = SQLiteStatusResolver(db, "bridge_txn_status")
        try:
            await resolver.resolve(1)
        finally:
            await resolver.close()

    with pytest.raises(StatusTableMissing, match="status table bridge_txn_status does not exist"):
        asyncio.run(lookup())


def test_config_checks_the_dsn() -> None:
    with pytest.raises(ConfigError, match=r'resolver\.dsn: required when resolver\.type = "sqlite"'):
        build(ResolverConfig, {"type": "sqlite"}, prefix="resolver.")
    with pytest.raises(ConfigError, match=r"expected sqlite:///path/file\.db"):
        build(ResolverConfig, {"type": "sqlite", "dsn": "mysql://root@h/db"}, prefix="resolver.")


def test_lost_commits_through_the_storage_engine(tmp_path: Path) -> None:
    """Prewrites whose Commits never came: those with a status row upstream are
    pulled at its commit_ts after one sweep, the others are dropped."""
    hour_ago_ms = int(time.time() * 1000) - 3_600_000
    starts = [compose(hour_ago_ms + i, 0) for i in range(6)]
    committed = {starts[1]: starts[1] + 7, starts[4]: starts[4] + 3}
    db = tmp_path / "up.db"
    upstream(db, committed)

    async def scenario() -> list[tuple[int, int, bytes]]:
        storage = await Storage.open(tmp_path / "pump")
        resolver = SQLiteStatusResolver(db, "bridge_txn_status")
        try:
            prewrites = [prewrite(ts, []) for ts in starts]
            await storage.write([(b, b.SerializeToString()) for b in prewrites])
            result = await LostCommitSweeper(storage, resolver, max_txn_timeout=60, interval=1).sweep_once()
            assert (result.found, result.discarded, result.pending) == (2, 4, 0)
            fake_ts = compose(int(time.time() * 1000), 0)
            await storage.write_fake(fake_ts)
            return await pull_until(storage, fake_ts)
        finally:
            await resolver.close()
            await storage.close()

    txns = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert [(s, c) for s, c, _ in txns] == sorted(committed.items(), key=lambda item: item[1])
    for start_ts, _, payload in txns:
        assert parse_binlog(payload).start_ts == start_ts

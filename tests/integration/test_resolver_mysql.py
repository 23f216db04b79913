"""The lost-commit resolver against a real MariaDB/MySQL upstream.

Each test makes its own database (and user, where it needs one) and drops it.
The upstream is ``BRIDGE_TEST_MYSQL_DSN`` (default ``mysql://root@127.0.0.1:3306/``).
The sweeper is driven with a small storage object written here: it implements
the sweeper's own ``UnpairedPrewrites`` protocol; the database is real.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from bridge.binlog import parse_binlog, prewrite
from bridge.dsn import Dsn, parse_mysql_dsn
from bridge.tso import compose
from pump import metrics
from pump.config import ResolverConfig
from pump.resolver import LostCommitSweeper, MySQLStatusResolver, build_resolver
from pump.resolver_base import ResolverError, ResolverUnavailable, StatusTableMissing
from pump.storage import CommittedTxn, Storage, Watermark
from tests.support.process import free_port

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(120)]

DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_DSN = "mysql://root@127.0.0.1:3306/"
STATUS_DDL = "CREATE TABLE bridge_txn_status (start_ts BIGINT PRIMARY KEY, commit_ts BIGINT NOT NULL)"
STATUS_ROWS = {1001: 1005, 1003: 1010, 1007: 1008}


@pytest.fixture(scope="module")
def server_dsn() -> Dsn:
    return parse_mysql_dsn(os.environ.get(DSN_ENV, DEFAULT_DSN))


def admin(dsn: Dsn, database: str = "") -> pymysql.connections.Connection:
    return pymysql.connect(
        host=dsn.host,
        port=dsn.port,
        user=dsn.user,
        password=dsn.password,
        database=database or None,
        autocommit=True,
    )


@pytest.fixture
def upstream(server_dsn: Dsn, unique_name: str) -> Iterator[Dsn]:
    """A fresh database with the status table and a few rows; dropped afterwards."""
    conn = admin(server_dsn)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique_name}`")
        # Qualified names, no USE: this connection must not count as one of the
        # database's own (a test kills those).
        cur.execute(STATUS_DDL.replace("TABLE ", f"TABLE `{unique_name}`.", 1))
        cur.executemany(
            f"INSERT INTO `{unique_name}`.bridge_txn_status VALUES (%s, %s)", list(STATUS_ROWS.items())
        )
    try:
        yield server_dsn.with_database(unique_name)
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")
        conn.close()


class UnpairedStore:
    """Prewrites with an arrival time; resolutions recorded in order."""

    def __init__(self, arrivals: dict[int, float]) -> None:
        self.arrivals = dict(arrivals)
        self.resolved: list[tuple[int, int | None]] = []

    def unpaired_older_than(self, age: float) -> list[int]:
        now = time.monotonic()
        return sorted(ts for ts, arrived in self.arrivals.items() if now - arrived >= age)

    async def resolve(self, start_ts: int, commit_ts: int | None, by: str = "") -> None:
        del self.arrivals[start_ts]
        self.resolved.append((start_ts, commit_ts))


def old_and_young(old: list[int], young: list[int]) -> dict[int, float]:
    """Arrival times far in the past (old) and far in the future (never old in a test)."""
    now = time.monotonic()
    return {**{ts: now - 3600 for ts in old}, **{ts: now + 3600 for ts in young}}


def test_found_start_ts_resolve_to_the_status_tables_commit_ts(upstream: Dsn) -> None:
    async def scenario() -> dict[int, int | None]:
        resolver = MySQLStatusResolver(upstream)
        try:
            return {ts: await resolver.resolve(ts) for ts in (1001, 1002, 1003, 1007, 9999)}
        finally:
            await resolver.close()

    assert asyncio.run(scenario()) == {1001: 1005, 1002: None, 1003: 1010, 1007: 1008, 9999: None}


def test_sweeper_commits_found_prewrites_and_discards_the_rest(upstream: Dsn) -> None:
    store = UnpairedStore(old_and_young(old=[1001, 1002, 1003, 1004], young=[1007, 1008]))
    found_before = metrics.LOST_COMMITS.labels("found")._value.get()
    discarded_before = metrics.LOST_COMMITS.labels("discarded")._value.get()

    async def scenario() -> None:
        resolver = MySQLStatusResolver(upstream)
        sweeper = LostCommitSweeper(store, resolver, max_txn_timeout=600, interval=0.05)
        try:
            result = await sweeper.sweep_once()
            assert (result.found, result.discarded, result.pending) == (2, 2, 0)
        finally:
            await resolver.close()

    asyncio.run(scenario())
    assert store.resolved == [(1001, 1005), (1002, None), (1003, 1010), (1004, None)]
    assert sorted(store.arrivals) == [1007, 1008]  # younger than max-txn-timeout: not asked about
    assert metrics.LOST_COMMITS.labels("found")._value.get() - found_before == 2
    assert metrics.LOST_COMMITS.labels("discarded")._value.get() - discarded_before == 2


def test_sweeper_run_loop_resolves_prewrites_as_they_age(upstream: Dsn) -> None:
    store = UnpairedStore(old_and_young(old=[1003], young=[]))

    async def scenario() -> None:
        resolver = MySQLStatusResolver(upstream)
        sweeper = LostCommitSweeper(store, resolver, max_txn_timeout=0.2, interval=0.05)
        task = asyncio.create_task(sweeper.run())
        try:
            store.arrivals[1007] = time.monotonic()  # unpaired from now on: old after 0.2 s
            while store.arrivals:
                await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await resolver.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert store.resolved == [(1003, 1010), (1007, 1008)]


def test_unreachable_upstream_leaves_prewrites_pending(caplog: pytest.LogCaptureFixture) -> None:
    nowhere = parse_mysql_dsn(f"mysql://root@127.0.0.1:{free_port()}/nothing")
    store = UnpairedStore(old_and_young(old=[1001, 1002], young=[]))
    errors_before = metrics.ERRORS.labels("resolver")._value.get()

    async def scenario() -> None:
        resolver = MySQLStatusResolver(nowhere, timeout=2, attempts=2)
        sweeper = LostCommitSweeper(store, resolver, max_txn_timeout=1, interval=0.05)
        try:
            with pytest.raises(ResolverUnavailable, match="unreachable"):
                await resolver.resolve(1001)
            result = await sweeper.sweep_once()
            assert (result.found, result.discarded, result.pending) == (0, 0, 2)
        finally:
            await resolver.close()

    with caplog.at_level(logging.WARNING, logger="pump.resolver"):
        asyncio.run(scenario())
    assert store.resolved == []  # nothing discarded on error
    assert sorted(store.arrivals) == [1001, 1002]
    assert metrics.ERRORS.labels("resolver")._value.get() > errors_before
    assert "2 Prewrites stay pending" in caplog.text


def test_missing_status_table_is_a_clear_error_and_decides_nothing(server_dsn: Dsn, unique_name: str) -> None:
    conn = admin(server_dsn)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique_name}`")
    store = UnpairedStore(old_and_young(old=[1001], young=[]))

    async def scenario() -> None:
        resolver = MySQLStatusResolver(server_dsn.with_database(unique_name))
        try:
            with pytest.raises(
                StatusTableMissing, match=f"`{unique_name}`.`bridge_txn_status` does not exist"
            ):
                await resolver.resolve(1001)
            result = await LostCommitSweeper(store, resolver, 1, 0.05).sweep_once()
            assert result.pending == 1
        finally:
            await resolver.close()

    try:
        asyncio.run(scenario())
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE `{unique_name}`")
        conn.close()
    assert store.resolved == []


def test_reconnects_after_the_server_drops_the_connection(upstream: Dsn, server_dsn: Dsn) -> None:
    async def scenario() -> None:
        resolver = MySQLStatusResolver(upstream)
        try:
            assert await resolver.resolve(1001) == 1005
            conn = admin(server_dsn)
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s", (upstream.database,)
                )
                ids = [row[0] for row in cur.fetchall()]
                assert ids, "the resolver's connection should be open"
                for thread_id in ids:
                    cur.execute(f"KILL {int(thread_id)}")
            conn.close()
            assert await resolver.resolve(1003) == 1010
        finally:
            await resolver.close()

    asyncio.run(scenario())


def test_password_from_env_is_used_and_never_logged(
    upstream: Dsn, server_dsn: Dsn, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    user, password = f"u{unique_name[1:9]}", f"pw-{unique_name}-secret"
    conn = admin(server_dsn)
    with conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
        cur.execute(f"GRANT SELECT ON `{upstream.database}`.* TO '{user}'@'%'")
    dsn_without_password = f"mysql://{user}@{upstream.host}:{upstream.port}/{upstream.database}"
    config = ResolverConfig(type="mysql", dsn=dsn_without_password)

    async def scenario() -> None:
        os.environ["BRIDGE_RESOLVER_PASSWORD"] = password
        try:
            resolver = build_resolver(config)
        finally:
            del os.environ["BRIDGE_RESOLVER_PASSWORD"]
        try:
            assert await resolver.resolve(1007) == 1008
        finally:
            await resolver.close()
        wrong = build_resolver(
            ResolverConfig(type="mysql", dsn=dsn_without_password.replace("@", ":nope-x@", 1))
        )
        try:
            with pytest.raises(ResolverError, match="Access denied") as failure:
                await wrong.resolve(1007)
            assert "nope-x" not in str(failure.value)
        finally:
            await wrong.close()

    try:
        with caplog.at_level(logging.DEBUG):
            asyncio.run(scenario())
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP USER '{user}'@'%'")
        conn.close()
    assert password not in caplog.text
    assert "nope-x" not in caplog.text
    assert f"mysql://{user}:***@" in caplog.text  # the DSN with a password is logged redacted


def test_lost_commits_through_the_storage_engine(server_dsn: Dsn, unique_name: str, tmp_path: Path) -> None:
    """The issue's lost-commit scenario with the real storage engine: Prewrites
    without Commits, some with a status row upstream and some without; after a
    sweep, a pull from 0 returns exactly the first, at the status table's commit_ts."""
    hour_ago_ms = int(time.time() * 1000) - 3_600_000
    starts = [compose(hour_ago_ms + i, 0) for i in range(6)]
    committed = {starts[0]: starts[0] + 5, starts[2]: starts[2] + 9, starts[5]: starts[5] + 1}
    conn = admin(server_dsn)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique_name}`")
        cur.execute(STATUS_DDL.replace("TABLE ", f"TABLE `{unique_name}`.", 1))
        cur.executemany(
            f"INSERT INTO `{unique_name}`.bridge_txn_status VALUES (%s, %s)", list(committed.items())
        )

    async def scenario() -> list[tuple[int, int, bytes]]:
        storage = await Storage.open(tmp_path / "pump")
        resolver = MySQLStatusResolver(server_dsn.with_database(unique_name))
        try:
            prewrites = [prewrite(ts, []) for ts in starts]
            await storage.write([(b, b.SerializeToString()) for b in prewrites])
            result = await LostCommitSweeper(storage, resolver, max_txn_timeout=60, interval=1).sweep_once()
            assert (result.found, result.discarded, result.pending) == (3, 3, 0)
            assert storage.unpaired_count == 0
            fake_ts = compose(int(time.time() * 1000), 0)
            await storage.write_fake(fake_ts)
            return await pull_until(storage, fake_ts)
        finally:
            await resolver.close()
            await storage.close()

    try:
        txns = asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE `{unique_name}`")
        conn.close()
    assert [(s, c) for s, c, _ in txns] == sorted(committed.items(), key=lambda item: item[1])
    for start_ts, _, payload in txns:
        assert parse_binlog(payload).start_ts == start_ts  # each carries its own Prewrite


async def pull_until(storage: Storage, watermark: int) -> list[tuple[int, int, bytes]]:
    txns: list[tuple[int, int, bytes]] = []
    async for items in storage.pull(0):
        for item in items:
            if isinstance(item, CommittedTxn):
                txns.append((item.start_ts, item.commit_ts, item.payload))
            elif isinstance(item, Watermark) and item.ts >= watermark:
                return txns
    raise AssertionError("the pull ended before the watermark reached the fake binlog")

"""The MySQL sink through a downstream switchover: the server turns read-only for a while (as a
primary does while it is demoted), and the drainer's connections are killed (as a proxy or an
operator does during a failover). The drainer logs in as a user without SUPER or READ ONLY ADMIN,
as a production drainer does, so ``read_only`` refuses its writes (error 1290).

In each case the drainer stays up, logs what it waits for, and the downstream ends equal to the
upstream (``bridge.apps.diff``). The downstream is the private MariaDB of the e2e tests
(``downstream_mysql``): ``SET GLOBAL read_only`` there touches no other test's server, and it is
turned off again whatever happens. Timeouts and the guards of ``wait_for`` are hang guards only.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import pymysql
import pytest

from bridge.apps.demo.cluster import Cluster
from bridge.apps.demo.workload import LoadProcess
from tests.e2e.test_mysql_sink_e2e import (
    Fault,
    Pipeline,
    assert_replicated,
    checkpoint_ts,
    pipeline,  # noqa: F401 - the fixture
    run_load,
)
from tests.e2e.test_pipeline import wait_for, wait_for_transactions
from tests.integration.test_mysql_checkpoint import query
from tests.support.mariadb_instance import MariaDBInstance

pytestmark = [pytest.mark.mysql, pytest.mark.slow, pytest.mark.timeout(300)]

READ_ONLY_SECONDS = 20.0  # a switchover's read-only window; several checkpoint intervals (3 s)
# What a drainer needs downstream (drainer --check's list, and INDEX for the load's DDL): no
# SUPER, no READ ONLY ADMIN, so read_only applies to it.
DRAINER_GRANTS = "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX"
KILLS = 4
CONNECTIONS_OF = "SELECT id FROM information_schema.processlist WHERE user = '{user}'"


@pytest.fixture
def drainer_login(downstream_mysql: MariaDBInstance, unique_name: str) -> Iterator[str]:
    """A user of the downstream with only the privileges replication needs; its DSN."""
    user = f"drainer_{unique_name}"
    on_downstream(downstream_mysql, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-{unique_name}'")
    try:
        on_downstream(downstream_mysql, f"GRANT {DRAINER_GRANTS} ON *.* TO '{user}'@'%'")
        yield f"mysql://{user}:pw-{unique_name}@{downstream_mysql.host}:{downstream_mysql.port}/"
    finally:
        downstream_mysql.start()  # a test may have left it stopped
        on_downstream(downstream_mysql, f"DROP USER IF EXISTS '{user}'@'%'")


def on_downstream(server: MariaDBInstance, sql: str) -> list[tuple[object, ...]]:
    return query(server.dsn, sql)


@contextlib.contextmanager
def read_only(server: MariaDBInstance) -> Iterator[None]:
    """The downstream refuses every write of a user without SUPER / READ ONLY ADMIN meanwhile."""
    on_downstream(server, "SET GLOBAL read_only = 1")
    try:
        yield
    finally:
        on_downstream(server, "SET GLOBAL read_only = 0")


def drainer_output(cluster: Cluster) -> str:
    return cluster.members["drainer"].process.output()


def read_only_window(cluster: Cluster, server: MariaDBInstance) -> None:
    """``READ_ONLY_SECONDS`` of read-only downstream; the drainer must log a refused write
    (1290) and still run at the end of it."""
    seen = drainer_output(cluster).count("1290")
    with read_only(server):
        began = time.monotonic()
        wait_for(lambda: drainer_output(cluster).count("1290") > seen, "refused write logged", cluster)
        time.sleep(max(READ_ONLY_SECONDS - (time.monotonic() - began), 0.0))
        cluster.check()  # the drainer is still running


def test_read_only_downstream_while_the_upstream_is_idle(pipeline: Pipeline, drainer_login: str) -> None:  # noqa: F811
    """Only the checkpoint writes (fake binlogs move the resolved ts on): its saves are refused.
    The checkpoint retries for 5 s, less than the window: then the drainer tries it again later."""
    pipeline.login, pipeline.checkpoint_options = drainer_login, {"retry-timeout": "5s"}
    cluster = pipeline.start()
    run_load(pipeline, seconds=5)
    cluster.wait_caught_up(cluster.timestamp(), timeout=180)
    read_only_window(cluster, pipeline.downstream)
    output = drainer_output(cluster)
    assert "save failed (MySQL error 1290" in output, cluster.members["drainer"].process.tail()  # retried
    assert "checkpoint not saved at commit_ts" in output, cluster.members["drainer"].process.tail()
    assert_replicated(pipeline)  # the checkpoint moves on once the window is over
    assert cluster.members["drainer"].process.starts == 1


def read_only_during_load(server: MariaDBInstance) -> Fault:
    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        read_only_window(cluster, server)
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)

    return fault


def test_read_only_downstream_under_load(pipeline: Pipeline, drainer_login: str) -> None:  # noqa: F811
    pipeline.login = drainer_login
    cluster = pipeline.start()
    run_load(pipeline, seconds=150, fault=read_only_during_load(pipeline.downstream))
    assert_replicated(pipeline)
    assert cluster.members["drainer"].process.starts == 1


def checkpoint_past(cluster: Cluster, ts: int) -> Callable[[], bool]:
    return lambda: checkpoint_ts(cluster) > ts


def kill_drainer_connections(server: MariaDBInstance, user: str) -> Fault:
    """``KILL`` every connection of the drainer's user (1927 / 2013 on its side), alternating with
    ``KILL QUERY`` (1317), ``KILLS`` times, each once the checkpoint has moved on since the last."""

    def drainer_connections() -> list[tuple[object, ...]]:
        return on_downstream(server, CONNECTIONS_OF.format(user=user))

    def drainer_connected() -> bool:
        return bool(drainer_connections())

    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        for i in range(KILLS):
            seen = checkpoint_ts(cluster)
            # Right after the last kill (or between two batches) the drainer may hold no
            # connection yet: it reconnects when it next writes.
            wait_for(drainer_connected, "connection of the drainer to the downstream", cluster)
            rows = drainer_connections()
            how = "KILL QUERY" if i % 2 else "KILL"
            for (connection_id,) in rows:
                with contextlib.suppress(pymysql.err.OperationalError):  # it went away meanwhile
                    on_downstream(server, f"{how} {int(str(connection_id))}")
            wait_for(checkpoint_past(cluster, seen), "checkpoint progress after the kill", cluster)
            assert load.running, "the load ended before the kills did; give it more --seconds"

    return fault


def test_drainer_connections_killed_under_load(pipeline: Pipeline, drainer_login: str) -> None:  # noqa: F811
    pipeline.login = drainer_login
    cluster = pipeline.start()
    user = drainer_login.split("://", 1)[1].split(":", 1)[0]
    run_load(pipeline, seconds=150, fault=kill_drainer_connections(pipeline.downstream, user))
    output = drainer_output(cluster)
    assert any(code in output for code in ("1927", "2013", "2006")), cluster.members["drainer"].process.tail()
    assert_replicated(pipeline)
    assert cluster.members["drainer"].process.starts == 1

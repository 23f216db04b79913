"""The drainer's pre-flight (issue 18): ``binlog-bridge drainer --check`` against the real MariaDB,
Redis and Tansu broker, and a drainer whose sink cannot be used exiting before ``drainer ready``
without registering.

Each unusable sink gives exit 2 and one line naming what failed: a port where nothing listens, a
refused login, a user without the privileges replication needs, a broker that does not answer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge import mysql
from bridge.dsn import parse_dsn
from tests.support.drainer_cluster import DrainerProcess
from tests.support.process import ChildProcess, free_port, run_cli
from tests.support.pump_server import start_meta

pytestmark = pytest.mark.timeout(120)

MYSQL_DSN = os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/")
NO_META = "127.0.0.1:1"  # --check never dials the meta service


def check(tmp_path: Path, sink_type: str, sink_table: str) -> tuple[int, list[str]]:
    """``drainer --check`` with ``[sink] type = sink_type`` and ``sink_table`` as its table."""
    drainer = DrainerProcess(tmp_path, NO_META, sink_type=json.dumps(sink_type), sink_tables=sink_table)
    drainer.write_config()
    done = run_cli("drainer", "--config", str(drainer.config_path), "--check", "--log-level", "error")
    return done.returncode, (done.stdout + done.stderr).strip().splitlines()


@pytest.fixture
def mysql_user(unique_name: str) -> Iterator[tuple[str, str]]:
    """A login (user, password) granted SELECT only, dropped afterwards."""
    root = mysql.connect(parse_dsn(MYSQL_DSN), autocommit=True)
    password = "pw-" + unique_name
    with root.cursor() as cur:
        cur.execute(f"CREATE USER '{unique_name}'@'%%' IDENTIFIED BY %s", (password,))
        cur.execute(f"GRANT SELECT ON *.* TO '{unique_name}'@'%'")
    yield unique_name, password
    with root.cursor() as cur:
        cur.execute(f"DROP USER '{unique_name}'@'%'")
    root.close()


def with_login(user: str, password: str) -> str:
    host = MYSQL_DSN.split("@", 1)[1]
    return f"mysql://{user}:{password}@{host}"


def test_mysql_check_passes_and_names_a_refused_login_and_missing_privileges(
    tmp_path: Path, mysql_user: tuple[str, str], unique_name: str
) -> None:
    table = '[sink.mysql]\ndsn = "{dsn}"\nprogress-schema = "{schema}"\n'
    good = table.format(dsn=MYSQL_DSN, schema=unique_name)
    assert check(tmp_path, "mysql", good) == (0, ["drainer check passed: sink mysql can be used"])

    user, password = mysql_user
    wrong = table.format(dsn=with_login(user, "not-" + password), schema=unique_name)
    rc, lines = check(tmp_path, "mysql", wrong)
    assert rc == 2 and len(lines) == 1
    assert "cannot log in: (1045) Access denied" in lines[0] and password not in lines[0]

    weak = table.format(dsn=with_login(user, password), schema=unique_name)
    rc, lines = check(tmp_path, "mysql", weak)
    assert rc == 2 and len(lines) == 1
    assert "the user lacks INSERT, UPDATE, DELETE, CREATE, ALTER, DROP on every database" in lines[0]
    root = mysql.connect(parse_dsn(MYSQL_DSN), autocommit=True)
    with root.cursor() as cur:
        cur.execute(f"DROP DATABASE `{unique_name}`")  # the progress schema the passing check made
    root.close()


def test_redis_and_kafka_checks_pass_and_name_an_unreachable_server(
    tmp_path: Path, redis_url: str, kafka_bootstrap: str, unique_name: str
) -> None:
    assert check(tmp_path, "redis", f'[sink.redis]\nurl = "{redis_url}"\n') == (
        0,
        ["drainer check passed: sink redis can be used"],
    )
    closed = f"127.0.0.1:{free_port()}"
    rc, lines = check(tmp_path, "redis", f'[sink.redis]\nurl = "redis://{closed}/0"\n')
    assert rc == 2 and len(lines) == 1
    assert lines[0].startswith(f"binlog-bridge drainer: error: redis sink redis://{closed}/0: PING failed: ")

    kafka = '[sink.kafka]\nbootstrap-servers = "{servers}"\nprefix = "{prefix}"\n'
    assert check(tmp_path, "kafka", kafka.format(servers=kafka_bootstrap, prefix=unique_name)) == (
        0,
        ["drainer check passed: sink kafka can be used"],
    )
    rc, lines = check(tmp_path, "kafka", kafka.format(servers=closed, prefix=unique_name))
    assert rc == 2 and len(lines) == 1
    assert f"kafka sink {closed}: reading the cluster metadata: " in lines[0]


def test_a_drainer_whose_sink_cannot_be_used_exits_before_ready_unregistered(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    meta, meta_addr = start_meta(tmp_path)
    children.append(meta)
    closed = f"127.0.0.1:{free_port()}"
    drainer = DrainerProcess(
        tmp_path, meta_addr, sink_type='"redis"', sink_tables=f'[sink.redis]\nurl = "redis://{closed}/0"\n'
    )
    child = drainer.launch()
    children.append(child)
    assert child.wait(timeout=60) == 2
    assert "drainer ready" not in drainer.output
    assert f"redis sink redis://{closed}/0: PING failed" in drainer.output
    listed = run_cli("ctl", "--meta", meta_addr, "drainers", "--output", "json")
    assert (listed.returncode, json.loads(listed.stdout)) == (0, [])

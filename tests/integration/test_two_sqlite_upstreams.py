"""Two SQLite upstreams in one cluster (issue 18): each names its database in its DSN
(``sqlite:a.db?database=a``), so the drainer's one sqlite sink holds both apart.

Real children: `binlog-bridge meta`, one pump and a drainer (sqlite sink) through the demo
:class:`~bridge.apps.demo.cluster.Cluster`; `binlog-bridge load` into each upstream, the same
tables in both. Without the names the second ``CREATE TABLE`` of ``main.load_accounts`` halts
the drainer. Then ``binlog-bridge diff`` finds each upstream equal to its database downstream,
read both from the sink's directory by ``?database=`` and from its file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.apps.demo.cluster import Cluster, ClusterSpec
from bridge.dsn import parse_dsn
from bridge.errors import ConfigError
from bridge.producer.open import open_upstream
from tests.support.process import run_cli

pytestmark = pytest.mark.timeout(180)

HANG_GUARD = 90.0
LOAD_TABLES = {"load_accounts", "load_orders", "load_events", "load_docs", "load_wide"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(ClusterSpec(tmp_path / "cluster", pumps=1, sinks=("sqlite",)))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def load(cluster: Cluster, upstream: str, seed: int) -> None:
    done = run_cli(
        "load",
        "--meta",
        cluster.meta_addr,
        "--upstream",
        upstream,
        "--seconds",
        "2",
        "--concurrency",
        "2",
        "--seed",
        str(seed),
        "--ddl-interval",
        "0.5",
        timeout=HANG_GUARD,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"transactions": 0,' not in done.stdout, done.stdout


def test_two_sqlite_upstreams_named_apart_replicate_into_one_sink(tmp_path: Path, cluster: Cluster) -> None:
    upstreams = {name: f"sqlite://{tmp_path / f'up-{name}.db'}?database={name}" for name in ("a", "b")}
    for seed, upstream in enumerate(upstreams.values(), start=1):
        load(cluster, upstream, seed)

    cluster.wait_caught_up(cluster.timestamp(), timeout=HANG_GUARD)

    assert {p.name for p in cluster.sqlite_dir.glob("*.db")} >= {"a.db", "b.db"}
    assert not (cluster.sqlite_dir / "main.db").exists()
    for name, upstream in upstreams.items():
        for downstream in (
            f"{cluster.downstream_dsn}?database={name}",
            f"sqlite://{cluster.sqlite_dir / f'{name}.db'}?database={name}",
        ):
            done = run_cli("diff", "--upstream", upstream, "--downstream", downstream, "--quiet")
            assert done.returncode == 0, done.stdout + done.stderr
            lines = done.stdout.splitlines()
            compared = {line.split(":")[0] for line in lines if line.startswith(f"{name}.")}
            assert compared >= {f"{name}.{table}" for table in LOAD_TABLES}, done.stdout


def test_diff_refuses_a_database_the_sink_directory_lacks(tmp_path: Path) -> None:
    sink_dir = tmp_path / "sqlite"
    sink_dir.mkdir()
    (sink_dir / "a.db").touch()
    done = run_cli(
        "diff", "--upstream", f"sqlite://{sink_dir}?database=nosuch", "--downstream", f"sqlite://{sink_dir}"
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no file nosuch.db for database 'nosuch'" in done.stderr


def test_the_sqlite_dsn_names_the_database_and_refuses_other_parameters() -> None:
    dsn = parse_dsn("sqlite:var/up.db?database=shop%20b")
    assert (dsn.path, dsn.database, dsn.sqlite_database) == ("var/up.db", "shop b", "shop b")
    assert dsn.redacted() == "sqlite:var/up.db?database=shop%20b"
    assert open_upstream(dsn).database == "shop b"
    assert open_upstream("sqlite:///tmp/up.db").database == "main"
    assert parse_dsn("sqlite:///tmp/up.db?database=a").path == "/tmp/up.db"
    with pytest.raises(ConfigError, match="--upstream: unknown parameter 'mode'"):
        parse_dsn("sqlite:up.db?mode=ro", key="--upstream")
    with pytest.raises(ConfigError, match="database must be 1 to 64"):
        parse_dsn("sqlite:up.db?database=")

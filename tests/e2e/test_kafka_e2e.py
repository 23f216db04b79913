"""The Kafka path end to end, as real processes: `binlog-bridge load` (DDL during DML, against a
SQLite upstream) → three pumps → a drainer with the kafka sink (single-object encoding, the schemas
topic) → the real broker → `binlog-bridge consume --apply` into a fresh SQLite directory →
`bridge.apps.diff` against the upstream: equal. Also with the drainer SIGKILLed mid-load (the
re-delivered duplicates must be dropped), and schema evolution: a table topic holds messages of
several writer schemas (the load adds and drops columns of load_wide), and all decode.

Why these run single-object only: the registry encoding needs a Schema Registry shared by the
drainer process and the consumer process; none is installed here and `mock://` registries live
inside one process. tests/e2e/test_kafka_registry_e2e.py runs the same load with the drainer in
the test process (pumps and meta still children) and a `mock://` registry; the kafka sink's own
tests read its registry-encoded messages with plain confluent_kafka + AvroDeserializer.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.apps.demo.cluster import Cluster, ClusterSpec, resolver_for
from bridge.apps.diff import diff
from bridge.dsn import Dsn
from tests.e2e.test_pipeline import LOAD_TABLES, kill_and_restart, mysql_text, mysql_upstream, run_load
from tests.support.process import discard

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]

HANG_GUARD = 180.0


@pytest.fixture
def upstream(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'upstream.db'}"


__all__ = ["mysql_upstream"]  # a fixture of tests/e2e/test_pipeline.py, used here


def kafka_spec(workdir: Path, upstream: str, bootstrap: str, prefix: str) -> ClusterSpec:
    """meta, three pumps and a drainer whose only sink is kafka (topics prefixed ``prefix``)."""
    kafka = {"bootstrap-servers": bootstrap, "prefix": prefix, "resolved-interval": "300ms"}
    return ClusterSpec(
        workdir / "cluster",
        pumps=3,
        sinks=("kafka",),
        resolver=resolver_for(upstream),
        drainer_settings={"sink": {"kafka": kafka}, "resolved-interval": "300ms"},
    )


@pytest.fixture
def kafka_cluster(tmp_path: Path, upstream: str, kafka_bootstrap: str, unique_name: str) -> Iterator[Cluster]:
    cluster = Cluster(kafka_spec(tmp_path, upstream, kafka_bootstrap, unique_name))
    try:
        cluster.start()
        yield cluster
    finally:
        discard(cluster)


def consume(*args: str, timeout: float = HANG_GUARD) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bridge.cli", "consume", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def replay_and_diff(
    cluster: Cluster, upstream: str, bootstrap: str, prefix: str, target: Path
) -> subprocess.CompletedProcess[str]:
    """Catch the drainer up past every commit, `consume --apply --until-ts` it into ``target``,
    diff against the upstream; returns the finished consume (its summary line is stdout)."""
    final_ts = cluster.timestamp()
    cluster.wait_caught_up(final_ts, timeout=HANG_GUARD)
    result = consume(
        "--bootstrap-servers", bootstrap, "--prefix", prefix, "--apply", f"sqlite://{target}",
        "--until-ts", str(final_ts), "--idle-timeout", "60",
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-4000:]}"
    report = diff(upstream, f"sqlite://{target}")
    names = {table.name.split(".", 1)[1] for table in report.tables}
    assert names >= LOAD_TABLES, report.lines()
    assert report.equal, "\n".join(report.lines())
    return result


SUMMARY = re.compile(
    r"applied (?P<rows>\d+) row changes and (?P<ddl>\d+) DDL up to commit_ts (?P<ts>\d+) "
    r"\((?P<messages>\d+) messages read, (?P<duplicates>\d+) duplicates dropped, (?P<skipped>\d+) already"
)


def summary_counts(line: str) -> dict[str, int]:
    """The numbers of consume --apply's summary line."""
    found = SUMMARY.search(line)
    assert found is not None, line
    return {name: int(value) for name, value in found.groupdict().items()}


def test_load_through_the_kafka_sink_replays_equal_and_every_schema_version_decodes(
    kafka_cluster: Cluster, upstream: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    run_load(kafka_cluster, upstream, seconds=8)
    applied = replay_and_diff(kafka_cluster, upstream, kafka_bootstrap, unique_name, tmp_path / "replica")
    counts = summary_counts(applied.stdout)
    assert counts["rows"] > 0, applied.stdout
    # print mode over the whole prefix also knows when everything up to that commit_ts was read
    everything = consume(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", unique_name, "--from-beginning",
        "--until-ts", str(counts["ts"]), "--idle-timeout", "60",
    )  # fmt: skip
    assert everything.returncode == 0, everything.stderr[-3000:]
    assert f"stopped: --until-ts {counts['ts']} complete" in everything.stderr, everything.stderr[-3000:]
    printed = [json.loads(x) for x in everything.stdout.splitlines()]
    assert sum("op" in x for x in printed) >= counts["rows"]  # duplicates included: print mode shows all
    # schema evolution: load_wide's topic holds rows written before and after its ADD/DROP COLUMNs;
    # print mode decodes every one of them (each with its own writer schema)
    wide = consume(
        "--bootstrap-servers", kafka_bootstrap, "--topic", f"{unique_name}.main.load_wide",
        "--prefix", unique_name, "--from-beginning", "--idle-timeout", "5",
    )  # fmt: skip
    assert wide.returncode == 0, wide.stderr[-4000:]
    rows = [json.loads(x) for x in wide.stdout.splitlines()]
    images = [r["after"] or r["before"] for r in rows if "op" in r]
    shapes = {tuple(sorted(image)) for image in images}
    assert len(images) > 0 and len(shapes) >= 2, f"{len(images)} rows of {len(shapes)} column sets"
    # and the DDL topic tells which columns the load added
    ddl = consume(
        "--bootstrap-servers", kafka_bootstrap, "--topic", f"{unique_name}._ddl", "--prefix", unique_name,
        "--from-beginning", "--idle-timeout", "5",
    )  # fmt: skip
    events = [json.loads(x)["ddl"] for x in ddl.stdout.splitlines() if '"ddl"' in x]
    assert any(e["kind"] == "ALTER_TABLE" and e["table"] == "load_wide" for e in events), events[:5]
    # a dropped scratch table's topic gets no more watermarks: consume retired it instead of waiting
    dropped = {e["topic"] for e in events if e["kind"] == "DROP_TABLE"}
    print(f"{len(dropped)} dropped tables' topics retired")
    for topic in dropped:
        assert f"topic {topic} retired" in applied.stderr, applied.stderr[-3000:]


@pytest.mark.slow
def test_drainer_sigkilled_mid_load_replays_equal_with_duplicates_dropped(
    kafka_cluster: Cluster, upstream: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    run_load(kafka_cluster, upstream, seconds=15, fault=kill_and_restart("drainer"))
    drainer = kafka_cluster.members["drainer"].process
    assert drainer.starts == 2
    applied = replay_and_diff(kafka_cluster, upstream, kafka_bootstrap, unique_name, tmp_path / "replica")
    # the restarted drainer wrote what followed its checkpoint again; the consumer kept each once
    print(applied.stdout)  # for the record: how many duplicates this run had


def test_consume_apply_can_be_interrupted_and_resumed(
    kafka_cluster: Cluster, upstream: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """A consumer SIGTERMed while applying goes on where it stopped when run again."""
    run_load(kafka_cluster, upstream, seconds=5)
    target = tmp_path / "replica"
    argv = [
        sys.executable, "-m", "bridge.cli", "consume", "--bootstrap-servers", kafka_bootstrap,
        "--prefix", unique_name, "--apply", f"sqlite://{target}",
    ]  # fmt: skip
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + HANG_GUARD
        while not (target / "_bridge.sqlite").exists():  # it began applying
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "hang guard: consume never opened its target"
            time.sleep(0.1)
        first.terminate()
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err[-4000:]
    assert "stopped: signal" in out, out
    before = summary_counts(out)
    line = replay_and_diff(kafka_cluster, upstream, kafka_bootstrap, unique_name, target).stdout
    after = summary_counts(line)
    # the second run read everything again and skipped exactly what the first applied
    assert after["skipped"] == before["rows"] + before["ddl"], (out, line)
    assert after["rows"] + before["rows"] > 0


@pytest.mark.mysql
def test_mariadb_upstream_through_the_kafka_sink_replays_equal(
    tmp_path: Path, mysql_upstream: Dsn, kafka_bootstrap: str, unique_name: str
) -> None:
    upstream = mysql_text(mysql_upstream)
    cluster = Cluster(kafka_spec(tmp_path, upstream, kafka_bootstrap, unique_name))
    try:
        cluster.start()
        run_load(cluster, upstream, seconds=8)
        replay_and_diff(cluster, upstream, kafka_bootstrap, unique_name, tmp_path / "replica")
    finally:
        discard(cluster)


def applied_ts(target: Path) -> int:
    """The commit_ts the sqlite target applied (its sink's checkpoint), 0 before it exists."""
    path = target / "_bridge.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT commit_ts FROM _bridge_checkpoint").fetchone()
    return int(row[0]) if row else 0


def test_consume_following_the_load_live_picks_up_every_new_table(
    kafka_cluster: Cluster, upstream: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """consume --apply starts with the load, so the load's tables (and their topics) appear while it
    runs: each CREATE TABLE's new topic must be found and read before the release passes that DDL
    (the DDL-topic rule), and the scratch tables' topics retired after their drops, live."""
    target = tmp_path / "replica"
    argv = [
        sys.executable, "-m", "bridge.cli", "consume", "--bootstrap-servers", kafka_bootstrap,
        "--prefix", unique_name, "--apply", f"sqlite://{target}",
    ]  # fmt: skip
    log_path = tmp_path / "consume.log"
    log_file = log_path.open("w")
    follower = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, text=True)
    try:
        run_load(kafka_cluster, upstream, seconds=8)
        final_ts = kafka_cluster.timestamp()
        kafka_cluster.wait_caught_up(final_ts, timeout=HANG_GUARD)
        deadline = time.monotonic() + HANG_GUARD
        while applied_ts(target) < final_ts:
            assert follower.poll() is None, log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, f"hang guard: applied {applied_ts(target)}, not {final_ts}"
            time.sleep(0.2)
        follower.terminate()
        follower.wait(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
        log_file.close()
    output = log_path.read_text()
    assert follower.returncode == 0, output[-4000:]
    assert "stopped: signal" in output, output[-4000:]
    report = diff(upstream, f"sqlite://{target}")
    names = {table.name.split(".", 1)[1] for table in report.tables}
    assert names >= LOAD_TABLES, report.lines()
    assert report.equal, "\n".join(report.lines())
    # every table's topic was found (at the first listing or, mostly, later through a DDL event)
    for table in LOAD_TABLES:
        assert f"reading topic {unique_name}.main.{table} " in output, output[-3000:]

"""A real `binlog-bridge drainer` with the redis sink: a DDL that drops a column a key template uses
stops the drainer with the checkpoint below the DDL and a message naming rule, table, field and the
fix; with the rule fixed, the drainer resumes before the DDL and invalidates what followed it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from bridge.proto import row_pb2
from tests.integration.test_drainer_faults import producer
from tests.support.drainer_cluster import DrainerProcess, Producer, table
from tests.support.pump_server import PumpProcess

pytestmark = [pytest.mark.redis, pytest.mark.timeout(300)]

T = row_pb2.ColumnType


__all__ = ["producer"]  # test_drainer_faults.py's fixture; meta_addr and pumps: conftest.py


def sink_tables(url: str, prefix: str, templates: list[str]) -> str:
    return (
        f'[sink.redis]\nurl = "{url}"\ncheckpoint-key = "{prefix}:checkpoint"\n'
        f'[[sink.redis.rules]]\ndb = "shop"\ntable = "users"\nkeys = {json.dumps(templates)}\n'
    )


def users(with_email: bool) -> row_pb2.TableSchema:
    extra = (
        [row_pb2.Column(id=3, name="email", type=T.VARCHAR, length=64, nullable=True)] if with_email else []
    )
    schema = table("users", 10, extra=extra)
    schema.max_column_id = 3
    return schema


def test_a_dropped_template_column_stops_the_drainer_below_the_ddl_until_the_rule_is_fixed(
    pumps: list[PumpProcess],
    tmp_path: Path,
    meta_addr: str,
    producer: Producer,
    redis_url: str,
    unique_name: str,
) -> None:
    p = unique_name
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    templates = [f"{p}:user:{{id}}", f"{p}:email:{{email}}"]
    drainer = DrainerProcess(
        tmp_path, meta_addr, sink_type='"redis"', sink_tables=sink_tables(redis_url, p, templates)
    )
    try:
        client.mset(
            {f"{p}:user:{i}": "cached" for i in range(6)} | {f"{p}:email:{i}@x": "cached" for i in range(6)}
        )
        drainer.start()
        producer.create(users(with_email=True))
        producer.txn([("update", "users", (1, "a", "1@x"), (1, "a", "new@x"))])
        producer.txn([("delete", "users", (2, "b", "2@x"), None)])
        drop = producer.alter(users(with_email=False))
        producer.txn([("delete", "users", (3, "c"), None)])
        assert drainer.child is not None
        assert drainer.child.wait(timeout=120) != 0
        output = drainer.output
        for part in (
            "sink.redis.rules[0]",
            "shop.users",
            "{email}",
            f"commit_ts {drop.commit_ts}",
            "fix the rule",
            "it resumes before the DDL",
        ):
            assert part in output, output[-3000:]
        assert drainer.checkpoint()["commitTS"] < drop.commit_ts
        left = set(client.scan_iter(match=f"{p}:*"))
        assert left >= {f"{p}:user:3", f"{p}:email:3@x", f"{p}:user:4"}
        assert not left & {f"{p}:user:1", f"{p}:email:1@x", f"{p}:user:2", f"{p}:email:2@x"}
        mirror = json.loads(client.get(f"{p}:checkpoint") or '{"commit_ts": 0}')
        assert mirror["commit_ts"] < drop.commit_ts

        drainer.sink_tables = sink_tables(redis_url, p, templates[:1])  # the fix: the email template goes
        drainer.start()
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        assert f"{p}:user:3" not in set(client.scan_iter(match=f"{p}:*"))
        metrics = drainer.metrics()  # the sink's metrics are in the drainer's /metrics
        assert 'bridge_sink_redis_keys_total{mode="invalidate"}' in metrics
        assert "bridge_sink_redis_pipeline_seconds_count" in metrics
    finally:
        drainer.kill()
        keys = list(client.scan_iter(match=f"{p}:*"))
        if keys:
            client.delete(*keys)

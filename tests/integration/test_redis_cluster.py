"""The redis sink against the local three-master Redis Cluster (scripts/services redis-cluster):
keys spread over every node are invalidated exactly (grouped by slot, pipelined per node), a
TRUNCATE's SCAN reaches every master, and stream entries land on the node of their stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.cluster import ClusterNode, RedisCluster

from bridge.proto import row_pb2
from bridge.sink.events import Event
from drainer.sinks.redis import RedisSink
from tests.integration.test_redis_sink import Harness
from tests.support.redis_server import ddl, delete, insert, next_ts, stream_entries, txn, update

pytestmark = pytest.mark.redis

Change = row_pb2.SchemaChange


class ClusterHarness(Harness):
    """:class:`Harness` on the local Redis Cluster."""

    def __init__(self, nodes: list[str], prefix: str, tmp_path: Path) -> None:
        super().__init__(f"redis://{nodes[0]}/0", prefix, tmp_path)
        self.nodes = nodes
        self.client.close()
        startup = [ClusterNode(*node.rsplit(":", 1)) for node in nodes]
        self.client = RedisCluster(startup_nodes=startup, decode_responses=True)  # type: ignore[assignment]

    def open(
        self,
        rules: list[dict[str, Any]],
        tables: tuple[row_pb2.TableSchema, ...] = (),
        settings: dict[str, Any] | None = None,
    ) -> RedisSink:
        cluster = {"cluster": True, "cluster-nodes": self.nodes[1:], "del-batch-keys": 64}
        return super().open(rules, tables, {**cluster, **(settings or {})})

    def seed(self, *keys: str) -> None:
        pipe = self.client.pipeline()
        for key in keys:
            pipe.set(key, "cached")
        pipe.execute()

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
        for key in self.keys():
            self.client.delete(key)
        self.client.close()


@pytest.fixture
def cluster(redis_cluster_nodes: list[str], unique_name: str, tmp_path: Path) -> Iterator[ClusterHarness]:
    harness = ClusterHarness(redis_cluster_nodes, unique_name, tmp_path)
    yield harness
    harness.close()


def test_invalidation_across_every_node_is_exact(cluster: ClusterHarness) -> None:
    p, users = cluster.prefix, cluster.users
    cluster.open([{"db": p, "table": "users", "keys": [f"{p}:user:{{id}}", f"{p}:email:{{email}}"]}])
    cluster.seed(*[f"{p}:user:{i}" for i in range(3000)], *[f"{p}:email:{i}@x" for i in range(3000)])
    client = cluster.client
    assert isinstance(client, RedisCluster)
    slots = {client.keyslot(f"{p}:user:{i}") for i in range(3000)}
    nodes = {client.get_node_from_key(f"{p}:user:{i}").name for i in range(3000)}
    assert len(nodes) == len(cluster.nodes) and len(slots) > 1000
    changed = range(0, 3000, 3)
    ts = [next_ts() for _ in range(3)]
    events: list[Event] = [
        txn(ts[0], [update(users, (i, f"{i}@x", None), (i, f"{i}@y", None)) for i in changed if i % 2]),
        txn(ts[1], [delete(users, i, f"{i}@x", None) for i in changed if not i % 2]),
        txn(ts[2], [insert(users, 5000, "new@x", None)]),
    ]
    assert cluster.apply(events) == ts[2]
    expected = {f"{p}:user:{i}" for i in range(3000) if i % 3} | {
        f"{p}:email:{i}@x" for i in range(3000) if i % 3
    }
    assert cluster.keys() == expected


def test_truncate_scans_every_master(cluster: ClusterHarness) -> None:
    p, users = cluster.prefix, cluster.users
    cluster.open([{"db": p, "table": "users", "keys": [f"{p}:user:{{id}}"]}])
    cluster.seed(*[f"{p}:user:{i}" for i in range(500)], *[f"{p}:keep:{i}" for i in range(50)])
    cluster.apply([ddl(next_ts(), Change.TRUNCATE_TABLE, users, users, "TRUNCATE users")])
    assert cluster.keys() == {f"{p}:keep:{i}" for i in range(50)}


def test_streams_and_upserts_in_a_cluster(cluster: ClusterHarness) -> None:
    p, users = cluster.prefix, cluster.users
    stream = {"modes": ["stream"], "stream": f"{p}:s:{{table}}"}
    upsert = {"modes": ["upsert"], "upsert-format": "hash"}
    cluster.open([
        {"db": p, "table": "users", "keys": [f"{p}:user:{{id}}"], **stream},
        {"db": p, "table": "users", "keys": [f"{p}:hash:{{id}}"], **upsert},
    ])  # fmt: skip
    ts = [next_ts() for _ in range(50)]
    cluster.apply([txn(t, [insert(users, n, None, f"n{n}")]) for n, t in enumerate(ts)])
    entries = stream_entries(cluster.client.xrange(f"{p}:s:users"))
    assert [int(fields["commit_ts"]) for _, fields in entries] == ts
    assert json.loads(entries[3][1]["after"]) == {"id": 3, "email": None, "name": "n3"}
    assert cluster.client.hgetall(f"{p}:hash:7") == {"id": "7", "name": "n7"}
    assert len({f"{p}:hash:{n}" for n in range(50)} & cluster.keys()) == 50

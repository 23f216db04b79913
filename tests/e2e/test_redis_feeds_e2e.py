"""The redis sink's change feeds end to end: `binlog-bridge load` (SQLite upstream, DDL during DML)
→ three pumps → a drainer with the redis sink, whose rules put load_orders and load_slots changes
on a stream per table and publish load_slots changes (and invalidate their slot keys). A plain
redis-py client reads the streams (XRANGE) and a plain subscriber the channel: replaying each stream
gives the upstream's final rows (compared with the upstream as ``diff`` reads it), every change of a
row starts from the image the previous one left (none missing, in commit order), and the subscriber
got the same changes in the same order."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from tests.e2e.test_redis_e2e import Client, RedisPipeline, run_load, snapshot
from tests.support.redis_server import stream_entries

pytestmark = [pytest.mark.redis, pytest.mark.timeout(420)]


@pytest.fixture
def upstream(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'upstream.db'}"


class Subscriber:
    """A plain redis-py subscriber collecting the JSON messages of one channel on a thread."""

    def __init__(self, client: redis.Redis, channel: str) -> None:
        self.pubsub = client.pubsub()
        self.pubsub.subscribe(channel)
        self.messages: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            message = self.pubsub.get_message(timeout=0.1)
            if message and message["type"] == "message":
                self.messages.append(json.loads(message["data"]))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.pubsub.close()


def entries(client: Client, stream: str) -> list[dict[str, Any]]:
    """Every entry of ``stream``, its JSON fields decoded."""
    out = []
    for _, fields in stream_entries(client.xrange(stream)):
        entry: dict[str, Any] = dict(fields)
        for name in ("key", "keys", "before", "after"):
            entry[name] = json.loads(entry[name])
        entry["commit_ts"], entry["pos"] = int(entry["commit_ts"]), int(entry["pos"])
        out.append(entry)
    return out


def replay(stream: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The rows a stream leaves (by id), checking that it is in commit order and that every
    change starts from the image the previous change of that row left (none is missing)."""
    rows: dict[int, dict[str, Any]] = {}
    last = (0, -1)
    for entry in stream:
        position = (entry["commit_ts"], entry["pos"])
        assert position > last, f"entry {position} after {last}"
        last = position
        before, after = entry["before"], entry["after"]
        if before is not None:
            assert rows.pop(before["id"], None) == before, f"a change of row {before['id']} is missing"
        if after is not None:
            assert after["id"] not in rows, f"row {after['id']} inserted twice"
            rows[after["id"]] = after
    return rows


def test_publish_and_stream_read_by_plain_clients(
    tmp_path: Path, upstream: str, redis_url: str, unique_name: str
) -> None:
    p = unique_name
    rules = [
        {"table": "/load_(orders|slots)/", "keys": [f"{p}:{{table}}:{{id}}"], "modes": ["stream"],
         "stream": f"{p}:stream:{{table}}"},
        {"table": "load_slots", "keys": [f"{p}:slot:{{slot}}"], "modes": ["publish", "invalidate"],
         "channel": f"{p}:changes:{{table}}"},
    ]  # fmt: skip
    client = redis.Redis.from_url(redis_url)
    pipe = RedisPipeline(tmp_path, upstream, p, {"url": redis_url}, client, rules)
    subscriber = Subscriber(client, f"{p}:changes:load_slots")
    try:
        pipe.start()
        run_load(pipe.cluster, upstream, seconds=8, seed=3)
        pipe.catch_up()
        _, final = snapshot(upstream)
        orders, slots = entries(client, f"{p}:stream:load_orders"), entries(client, f"{p}:stream:load_slots")
        assert {e["op"] for e in orders} == {"insert", "update", "delete"}
        replayed = replay(orders)
        upstream_orders = {cast(int, k[0]): row for k, row in final["load_orders"].items()}  # ids are ints
        assert replayed.keys() == upstream_orders.keys()
        for key, row in upstream_orders.items():
            got = replayed[key]
            assert (got["account_id"], got["qty"], got["status"]) == (
                row["account_id"],
                row["qty"],
                row["status"],
            )
        replayed_slots = replay(slots)
        assert {k: r["slot"] for k, r in replayed_slots.items()} == {
            k[0]: row["slot"] for k, row in final["load_slots"].items()
        }
        swaps = [e for e in slots if e["op"] == "update" and e["before"]["slot"] != e["after"]["slot"]]
        assert swaps, "no unique slot changed"
        for _ in range(100):  # pub/sub: delivered while the subscriber reads; the stream is complete
            if len(subscriber.messages) >= len(slots):
                break
            time.sleep(0.1)
        published = [
            (m["commit_ts"], m["pos"], m["op"], m["before"], m["after"]) for m in subscriber.messages
        ]
        assert published == [(e["commit_ts"], e["pos"], e["op"], e["before"], e["after"]) for e in slots]
        assert all(m["keys"] for m in subscriber.messages)
    finally:
        subscriber.close()
        pipe.cleanup()
        client.delete(f"{p}:stream:load_orders", f"{p}:stream:load_slots")

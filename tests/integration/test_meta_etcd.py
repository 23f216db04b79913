"""Two ``binlog-bridge meta`` processes on a real etcd: election, failover, fencing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from urllib.parse import urlsplit

import aetcd
import pytest

from bridge.apps.meta.etcd_store import EtcdStore
from bridge.errors import NotLeader, StoreError
from bridge.meta import MetaClient
from bridge.proto import meta_pb2
from tests.support.process import ChildProcess, bridge_cli, free_port, run_cli, wait_until
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.etcd

READY = r"meta ready: addr=(\S+) backend=etcd cluster_id=(\d+) leader=(yes|no)"


def start_meta(
    children: list[ChildProcess], tmp_path: Path, etcd_url: str, prefix: str
) -> tuple[ChildProcess, str]:
    port = free_port()
    argv = bridge_cli(
        "meta", "--etcd", etcd_url, "--etcd-prefix", prefix, "--addr", f"127.0.0.1:{port}", "--data-dir",
        str(tmp_path / f"unused-{port}"),
    )  # fmt: skip
    child = ChildProcess(argv, tmp_path / f"meta-{port}.log")
    children.append(child)
    child.wait_for_line(READY)
    return child, f"127.0.0.1:{port}"


def etcd_client(etcd_url: str) -> aetcd.Client:
    url = urlsplit(etcd_url)
    return aetcd.Client(host=url.hostname, port=url.port, timeout=5)


def statuses(addrs: list[str]) -> list[meta_pb2.StatusResponse]:
    async def main() -> list[meta_pb2.StatusResponse]:
        out = []
        for addr in addrs:
            async with MetaClient(addr) as client:
                out.append(await client.status())
        return out

    return asyncio.run(main())


def test_two_members_elect_one_leader_and_share_the_cluster_id(
    children, tmp_path, etcd_url, unique_name
) -> None:
    prefix = f"/{unique_name}"
    _, a = start_meta(children, tmp_path, etcd_url, prefix)
    _, b = start_meta(children, tmp_path, etcd_url, prefix)
    sa, sb = statuses([a, b])
    assert sa.is_leader and not sb.is_leader
    assert sa.cluster_id == sb.cluster_id != 0
    assert sa.leader_addr == sb.leader_addr == a
    assert sa.backend == sb.backend == "etcd"

    async def through_follower() -> int:
        async with MetaClient(b) as client:  # the follower names the leader; the client follows
            return await client.get_timestamp()

    assert asyncio.run(through_follower()) > 0
    tso = run_cli("ctl", "--meta", b, "tso")
    assert tso.returncode == 0 and tso.stdout.strip().isdigit()


@pytest.mark.slow
def test_sigkill_of_the_leader_hands_tso_to_the_other_and_timestamps_keep_increasing(
    children, tmp_path, etcd_url, unique_name
) -> None:
    prefix = f"/{unique_name}"
    leader, a = start_meta(children, tmp_path, etcd_url, prefix)
    _, b = start_meta(children, tmp_path, etcd_url, prefix)

    async def caller(client: MetaClient, seen: list[int], stop: asyncio.Event) -> None:
        while not stop.is_set():
            first = await client.get_timestamps(10)
            assert not seen or first > seen[-1], f"timestamp {first} after {seen[-1]}"
            seen.append(first + 9)

    async def main() -> tuple[list[list[int]], list[int]]:
        streams: list[list[int]] = [[] for _ in range(4)]
        stop = asyncio.Event()
        async with MetaClient(f"{a},{b}", timeout=30) as client:
            tasks = [asyncio.create_task(caller(client, s, stop)) for s in streams]
            while min(map(len, streams)) < 50:
                await asyncio.sleep(0.01)
            leader.kill()
            killed = time.monotonic()
            marks = [len(s) for s in streams]
            while any(len(s) < m + 50 for s, m in zip(streams, marks, strict=True)):
                await asyncio.sleep(0.01)
                for task in tasks:
                    if task.done():
                        task.result()  # a caller that failed fails the test now
            print(f"the other member served within {time.monotonic() - killed:.1f}s of the SIGKILL")
            stop.set()
            await asyncio.gather(*tasks)
        return streams, marks

    streams, marks = asyncio.run(main())
    everything = [ts for s in streams for ts in s]
    assert len(everything) == len(set(everything))
    # The first answer after the kill may still come from the old leader (in flight);
    # everything after it comes from the new leader and exceeds all the old one gave.
    old = max(ts for s, m in zip(streams, marks, strict=True) for ts in s[:m])
    assert min(ts for s, m in zip(streams, marks, strict=True) for ts in s[m + 1 :]) > old
    status = statuses([b])[0]
    assert status.is_leader and status.leader_addr == b


def test_graceful_stop_of_the_leader_resigns_at_once(children, tmp_path, etcd_url, unique_name) -> None:
    prefix = f"/{unique_name}"
    leader, a = start_meta(children, tmp_path, etcd_url, prefix)
    follower, b = start_meta(children, tmp_path, etcd_url, prefix)

    async def stamp(addr: str) -> int:
        async with MetaClient(addr, timeout=30) as client:
            return await client.get_timestamp()

    before = asyncio.run(stamp(a))
    assert leader.stop() == 0
    follower.wait_for_line(r"is the leader", timeout=30)
    assert asyncio.run(stamp(b)) > before


def test_registry_moves_with_the_leader(children, tmp_path, etcd_url, unique_name) -> None:
    prefix = f"/{unique_name}"
    leader, a = start_meta(children, tmp_path, etcd_url, prefix)
    _, b = start_meta(children, tmp_path, etcd_url, prefix)
    status = meta_pb2.NodeStatus(
        node_id="drainer-1",
        kind=meta_pb2.DRAINER,
        addr="127.0.0.1:8249",
        state=meta_pb2.ONLINE,
        max_commit_ts=42,
    )

    async def heartbeat() -> None:
        async with MetaClient(a) as client:
            await client.heartbeat(status)

    async def listed() -> meta_pb2.ListNodesResponse:
        async with MetaClient(b, timeout=30) as client:
            return await client.list_nodes(meta_pb2.DRAINER)

    asyncio.run(heartbeat())
    leader.kill()
    nodes = asyncio.run(listed())
    assert [(n.node_id, n.max_commit_ts) for n in nodes.nodes] == [("drainer-1", 42)]


def test_garbage_json_in_a_registry_key_is_skipped_and_named(
    children, tmp_path, etcd_url, unique_name
) -> None:
    prefix = f"/{unique_name}"

    async def put_garbage() -> None:
        async with etcd_client(etcd_url) as etcd:
            await etcd.put(f"{prefix}/pumps/pump-bad".encode(), b"{not json")
            await etcd.put(
                f"{prefix}/pumps/pump-ok".encode(), b'{"nodeId":"pump-ok","host":"h:1","state":"online"}'
            )

    asyncio.run(put_garbage())
    meta, addr = start_meta(children, tmp_path, etcd_url, prefix)
    result = run_cli("ctl", "--meta", addr, "nodes")
    assert result.returncode == 0, result.stderr
    assert f"{prefix}/pumps/pump-bad" in result.stderr and "unreadable node record" in result.stderr
    assert "pump-ok" in result.stdout and "pump-bad" not in result.stdout
    assert "Traceback" not in result.stderr
    wait_until(lambda: f"{prefix}/pumps/pump-bad" in meta.output, what="the warning in the meta log")
    assert "WARNING" in meta.output


def test_a_deposed_leader_cannot_move_the_tso_window(etcd_url, unique_name) -> None:
    host, port = urlsplit(etcd_url).hostname, urlsplit(etcd_url).port
    assert host is not None and port is not None
    prefix = f"/{unique_name}"

    async def main() -> None:
        store = EtcdStore([(host, port)], prefix, "m1", "127.0.0.1:1", ttl_seconds=10)
        await store.open()
        try:
            assert await store.try_acquire()
            await store.save_tso_limit(1000)
            async with etcd_client(etcd_url) as etcd:
                await etcd.delete(f"{prefix}/meta/leader".encode())  # as if the lease had expired
                await etcd.put(f"{prefix}/meta/leader".encode(), b'{"addr":"127.0.0.1:2","member":"m2"}')
            with pytest.raises(NotLeader):
                await store.save_tso_limit(2000)
            await asyncio.wait_for(store.leadership_lost(), 10)
            assert await store.load_tso_limit() == 1000
        finally:
            await store.close()

    asyncio.run(main())


def test_leader_steps_down_when_its_key_vanishes(etcd_url, unique_name) -> None:
    host, port = urlsplit(etcd_url).hostname, urlsplit(etcd_url).port
    assert host is not None and port is not None
    prefix = f"/{unique_name}"

    async def main() -> None:
        store = EtcdStore([(host, port)], prefix, "m1", "127.0.0.1:1", ttl_seconds=1)
        await store.open()
        try:
            assert await store.try_acquire()
            async with etcd_client(etcd_url) as etcd:
                await etcd.delete(f"{prefix}/meta/leader".encode())
            await asyncio.wait_for(store.leadership_lost(), 10)  # noticed by the keepalive round
            assert await store.try_acquire()  # and it may campaign again
        finally:
            await store.close()

    asyncio.run(main())


def test_a_failed_call_moves_the_store_to_the_next_etcd_url(etcd_url, unique_name) -> None:
    """Two URLs of one etcd, the first through a fault proxy: once the proxy blackholes, a call
    times out (and raises), and the next calls go to the second URL, leadership included."""
    host, port = urlsplit(etcd_url).hostname, urlsplit(etcd_url).port
    assert host is not None and port is not None
    prefix = f"/{unique_name}"

    async def main(proxy: TcpProxy) -> None:
        store = EtcdStore(
            [("127.0.0.1", proxy.port), (host, port)], prefix, "m1", "127.0.0.1:1", ttl_seconds=3
        )
        await store.open()
        try:
            assert store.url == f"http://127.0.0.1:{proxy.port}"
            assert await store.try_acquire()
            await store.save_tso_limit(1000)
            proxy.blackhole()
            with pytest.raises(StoreError):
                await store.load_tso_limit()
            assert store.url == etcd_url.rstrip("/")
            assert await store.load_tso_limit() == 1000
            await asyncio.wait_for(store.leadership_lost(), 10)  # the refresh on the old URL failed
            assert await store.try_acquire()
            await store.save_tso_limit(2000)
            assert await store.load_tso_limit() == 2000
        finally:
            await store.close()

    with TcpProxy((host, port)) as proxy:
        asyncio.run(main(proxy))

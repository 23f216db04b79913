"""A real `binlog-bridge pump` SIGKILLed 20 times while producers keep writing
through the pump client SDK: after each restart every acknowledged Commit is
pulled back with its Prewrite, in commit order; a hand-torn last record is
truncated on restart."""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from bridge.binlog import commit, rollback
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig
from pump.storage.segment import encode_header
from tests.support.pump_server import Pulled, PumpProcess, prewrite_of, pull_until, start_meta
from tests.support.storage_calls import run_guarded

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

KILLS = 20
TEAR_EVERY = 5  # every fifth kill also tears the last record by hand
WRITERS = 8
HANG_GUARD = 500.0  # seconds: a safety net against hangs, never a performance bound
PUMP_CONFIG = """
[storage]
segment-size = 262144
"""


@dataclass
class Ledger:
    """What producers sent and what the SDK reported durable."""

    sent_commits: dict[int, int] = field(default_factory=dict)  # may be stored, may not
    committed: dict[int, int] = field(default_factory=dict)  # the Commit was acknowledged
    rolled_back: set[int] = field(default_factory=set)


async def producer(client: AsyncPumpsClient, rng: random.Random, ledger: Ledger, stop: asyncio.Event) -> None:
    """One transaction at a time, as a producer does: the Commit's ts is taken after
    the Prewrite was acknowledged. The SDK retries through pump restarts."""
    while not stop.is_set():
        start_ts = await client.get_timestamp()
        await client.write_binlog(prewrite_of(start_ts))
        if rng.random() < 0.2:
            ledger.rolled_back.add(start_ts)
            await client.write_binlog(rollback(start_ts))
            continue
        commit_ts = await client.get_timestamp()
        ledger.sent_commits[start_ts] = commit_ts
        await client.write_binlog(commit(start_ts, commit_ts))
        ledger.committed[start_ts] = commit_ts


def tear_last_record(data_dir: Path) -> Path:
    """Append half of a well-formed record to the live value-log segment."""
    live = max((data_dir / "value").glob("*.vlog"))
    payload = prewrite_of(1 << 50).SerializeToString()
    with live.open("ab") as f:
        f.write(encode_header(payload) + payload[: len(payload) // 2])
    return live


def check_after_restart(pulled: Pulled, acknowledged: dict[int, int], ledger: Ledger) -> None:
    """Every acknowledged Commit is there; nothing that was not sent as committed is."""
    commit_ts = [b.commit_ts for b in pulled.txns]
    assert all(a < b for a, b in itertools.pairwise(commit_ts)), "commit_ts not increasing"
    seen = {b.start_ts: b.commit_ts for b in pulled.txns}
    assert len(seen) == len(pulled.txns), "a transaction was pulled twice"
    missing = {s: c for s, c in acknowledged.items() if seen.get(s) != c}
    assert not missing, f"{len(missing)} acknowledged commits are missing, e.g. {list(missing.items())[:3]}"
    unexpected = {s: c for s, c in seen.items() if ledger.sent_commits.get(s) != c}
    assert not unexpected, f"pulled transactions never sent as committed: {list(unexpected.items())[:3]}"
    for binlog in pulled.txns:
        assert binlog.prewrite_value == prewrite_of(binlog.start_ts).prewrite_value


run = partial(run_guarded, guard=HANG_GUARD)


def commits_unsent() -> float:
    return REGISTRY.get_sample_value("bridge_pump_client_commit_unsent_total") or 0.0


def test_acknowledged_binlogs_survive_20_sigkills_and_a_torn_tail(tmp_path: Path) -> None:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr, extra_config=PUMP_CONFIG)
    ledger = Ledger()
    rng = random.Random(20)
    unsent_before = commits_unsent()
    config = PumpClientConfig(write_timeout=120, rpc_timeout=3, probe_interval=0.2, retry_backoff_max=0.3)

    async def scenario() -> None:
        await asyncio.to_thread(pump.start)
        async with AsyncPumpsClient(meta_addr, config) as client:
            stop = asyncio.Event()
            seeds = [rng.random() for _ in range(WRITERS)]
            writers = [asyncio.create_task(producer(client, random.Random(s), ledger, stop)) for s in seeds]
            for kill in range(1, KILLS + 1):
                await asyncio.sleep(rng.uniform(0.3, 1.2))
                acknowledged = dict(ledger.committed)
                pump.kill()
                torn = tear_last_record(pump.data_dir) if kill % TEAR_EVERY == 0 else None
                await asyncio.to_thread(pump.start)
                if torn is not None:
                    assert f"{torn}: truncated a torn record" in pump.output
                pulled = await pull_until(pump.addr, client.cluster_id, max(acknowledged.values()))
                check_after_restart(pulled, acknowledged, ledger)
            stop.set()
            await asyncio.gather(*writers)
            pulled = await pull_until(pump.addr, client.cluster_id, max(ledger.committed.values()))
            pulled.check(ledger.committed)

    try:
        run(scenario())
    finally:
        pump.kill()
        meta.kill()
    assert pump.starts == KILLS + 1
    assert commits_unsent() == unsent_before, "the SDK gave up on a Commit"
    assert len(ledger.committed) > KILLS * 10
    print(f"{len(ledger.committed)} committed and {len(ledger.rolled_back)} rolled back across {KILLS} kills")

"""A transaction of a million rows goes through a real drainer with bounded memory.

The producer's pump client (default ``chunk-bytes``, 4 MiB) writes it in
parts (PrewriteChunk binlogs, then the Prewrite); the drainer gathers the
parts on disk and decodes them one at a time while the sink iterates
``changes()``, which counts every row. The drainer's own peak RSS (``VmHWM``
of the child) is read, not timed, and must stay under 512 MiB (the goal of
issue 16 item 7; the whole transaction held at once took ~440 MiB before).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from bridge.binlog import TableMutationBuilder, commit, prewrite
from bridge.rowcodec import RowCodec
from tests.support.drainer_cluster import DrainerProcess, Producer, table
from tests.support.process import ChildProcess
from tests.support.pump_server import PumpProcess, start_meta
from tests.support.recording_sink import SINK_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROWS = 1_000_000
RSS_LIMIT = 512 << 20


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def chunked_so_far() -> tuple[float, float]:
    """(chunked transactions, parts) this process's pump clients wrote."""
    txns = REGISTRY.get_sample_value("bridge_pump_client_chunked_txns_total") or 0.0
    parts = REGISTRY.get_sample_value("bridge_pump_client_chunk_parts_total") or 0.0
    return txns, parts


def test_a_million_row_transaction_replicates_in_parts_under_512_mib(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    meta, meta_addr = start_meta(tmp_path)
    children.append(meta)
    pump = PumpProcess(tmp_path, meta_addr, node_id="pump-0")
    drainer = DrainerProcess(tmp_path, meta_addr, sink_tables=f'[sink."{SINK_TYPE}"]\nsummarize = true')
    producer: Producer | None = None
    try:
        pump.start()
        drainer.start()
        producer = Producer(meta_addr)
        schema = table("big", 30)
        producer.create(schema)
        codec = RowCodec(schema)
        mutation = TableMutationBuilder(schema.table_id)
        for i in range(ROWS):
            mutation.insert(codec.encode((i, f"row number {i} of the big one")))
        start_ts = producer.client.get_timestamp()
        txns_before, parts_before = chunked_so_far()
        binlog = prewrite(start_ts, [mutation.build()])
        del mutation
        producer.client.write_binlog(binlog)
        size = binlog.ByteSize()
        del binlog
        txns_after, parts_after = chunked_so_far()
        assert txns_after - txns_before == 1  # the chunked path, not one binlog
        assert parts_after - parts_before >= size // (4 << 20)
        commit_ts = producer.client.get_timestamp()
        producer.client.write_binlog(commit(start_ts, commit_ts))
        producer.txn([("insert", "big", None, (-1, "after"))])
        drainer.wait_checkpoint(producer.written[-1].commit_ts, timeout=400)
        big = next(r for r in drainer.records() if r.get("commit_ts") == commit_ts)
        assert big["rows"] == {"insert": ROWS}
        assert drainer.child is not None
        rss = peak_rss(drainer.child.proc.pid)
        print(
            f"payload {size / 2**20:.0f} MiB in {parts_after - parts_before:.0f} parts, "
            f"drainer peak RSS {rss / 2**20:.0f} MiB"
        )
        assert size > 30 << 20
        assert rss < RSS_LIMIT, (
            f"drainer peak RSS {rss / 2**20:.0f} MiB for a {size / 2**20:.0f} MiB transaction"
        )
    finally:
        if producer is not None:
            producer.close()
        drainer.kill()
        pump.kill()

"""Write transactions' binlogs to the pump cluster with the pump client.

Run against a meta service with at least one pump registered:

    python docs/examples/pump_client_example.py --meta 127.0.0.1:8248 [--txns 100]

Each transaction takes a start_ts from the meta service's TSO (through the client), writes its
Prewrite binlog (carrying the row changes) to a pump, "commits upstream",
takes a commit_ts and writes the Commit binlog, which the client sends to the
pump that took the Prewrite. The transactions run concurrently, so the
client coalesces their binlogs into batched WriteBinlogs calls.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from bridge.errors import MetaError, PumpError
from bridge.proto import binlog_pb2
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig


def prewrite(start_ts: int, row: bytes) -> binlog_pb2.Binlog:
    """A Prewrite inserting one (already encoded) row into table 1."""
    mutation = binlog_pb2.TableMutation(table_id=1, inserted_rows=[row], sequence=[binlog_pb2.Insert])
    value = binlog_pb2.PrewriteValue(schema_version=1, mutations=[mutation])
    return binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite,
        start_ts=start_ts,
        prewrite_key=b"t1_r%d" % start_ts,
        prewrite_value=value.SerializeToString(),
    )


async def transaction(pumps: AsyncPumpsClient, n: int) -> None:
    start_ts = await pumps.get_timestamp()
    await pumps.write_binlog(prewrite(start_ts, b"row %d" % n))
    # ... the upstream transaction commits here ...
    commit_ts = await pumps.get_timestamp()
    await pumps.write_binlog(binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=commit_ts))


async def main(meta_addrs: str, txns: int) -> int:
    config = PumpClientConfig(strategy="range", write_timeout=10.0)
    async with AsyncPumpsClient(meta_addrs, config) as pumps:
        print(f"cluster {pumps.cluster_id}; available pumps: {', '.join(pumps.available) or 'none'}")
        await asyncio.gather(*(transaction(pumps, n) for n in range(txns)))
    print(f"wrote {txns} transactions ({2 * txns} binlogs)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meta", required=True, help="meta service address(es), host:port[,host:port]")
    parser.add_argument("--txns", type=int, default=100)
    args = parser.parse_args()
    try:
        sys.exit(asyncio.run(main(args.meta, args.txns)))
    except (MetaError, PumpError) as exc:
        print(f"pump_client_example: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)

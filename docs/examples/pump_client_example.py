"""Write transactions' binlogs to the pump cluster with the pump client.

Run against a meta service with at least one pump registered:

    python docs/examples/pump_client_example.py --meta 127.0.0.1:8248 [--txns 100]

First a DDL binlog creates the table the rows go to (``example.items_<id>``,
or ``--db``/``--table``): a drainer tracks every table's schema from the DDL
binlogs, and stops at rows of a table no DDL created. Each run creates a
table of its own by default, because a second CREATE TABLE of a name the
drainer already tracks stops it too.

``--without-create`` leaves the DDL out, to show what a drainer does then
(docs/operations.md, "When a drainer halts").

Then each transaction takes a start_ts from the meta service's TSO (through
the client), writes its Prewrite binlog (carrying the row changes, encoded
with the table's schema) to a pump, "commits upstream", takes a commit_ts and
writes the Commit binlog, which the client sends to the pump that took the
Prewrite. The transactions run concurrently, so the client coalesces their
binlogs into batched WriteBinlogs calls.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from bridge.binlog import TableMutationBuilder, commit, ddl_prewrite, prewrite
from bridge.errors import MetaError, PumpError
from bridge.proto import row_pb2
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig
from bridge.rowcodec import RowCodec


def items_table(db: str, table: str, table_id: int) -> row_pb2.TableSchema:
    """``(id BIGINT PRIMARY KEY, note VARCHAR(64) NULL)``; column ids never change once given."""
    schema = row_pb2.TableSchema(table_id=table_id, db=db, table=table, max_column_id=2)
    schema.columns.add(id=1, name="id", type=row_pb2.ColumnType.BIGINT)
    schema.columns.add(id=2, name="note", type=row_pb2.ColumnType.VARCHAR, length=64, nullable=True)
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


async def create_table(pumps: AsyncPumpsClient, db: str, table: str) -> row_pb2.TableSchema:
    """The DDL binlog of CREATE TABLE, its SchemaChange carrying the schema the rows are encoded with."""
    start_ts = await pumps.get_timestamp()
    schema = items_table(db, table or f"items_{start_ts}", table_id=start_ts)  # a TSO value: unique
    change = row_pb2.SchemaChange(
        kind=row_pb2.SchemaChange.CREATE_TABLE, db=db, table=schema.table, table_schema=schema
    )
    query = f"CREATE TABLE `{db}`.`{schema.table}` (id BIGINT PRIMARY KEY, note VARCHAR(64))"
    await pumps.write_binlog(ddl_prewrite(start_ts, query, start_ts, change))
    # ... the upstream DDL runs here ...
    await pumps.write_binlog(commit(start_ts, await pumps.get_timestamp()))
    return schema


async def transaction(pumps: AsyncPumpsClient, codec: RowCodec, n: int) -> None:
    mutation = TableMutationBuilder(codec.schema.table_id)
    mutation.insert(codec.encode((n, f"row {n}")))
    start_ts = await pumps.get_timestamp()
    await pumps.write_binlog(prewrite(start_ts, [mutation.build()], b"items_r%d" % n))
    # ... the upstream transaction commits here ...
    commit_ts = await pumps.get_timestamp()
    await pumps.write_binlog(commit(start_ts, commit_ts))


async def main(meta_addrs: str, txns: int, db: str, table: str, without_create: bool) -> int:
    config = PumpClientConfig(strategy="range", write_timeout=10.0)
    async with AsyncPumpsClient(meta_addrs, config) as pumps:
        print(f"cluster {pumps.cluster_id}; available pumps: {', '.join(pumps.available) or 'none'}")
        if without_create:  # rows of a table id no DDL binlog created: a drainer stops at them
            schema = items_table(db, table or "never_created", table_id=await pumps.get_timestamp())
            print(f"no CREATE TABLE written: rows of table id {schema.table_id} follow")
        else:
            schema = await create_table(pumps, db, table)
            print(f"created table {schema.db}.{schema.table} (table id {schema.table_id})")
        codec = RowCodec(schema)
        await asyncio.gather(*(transaction(pumps, codec, n) for n in range(txns)))
    print(f"wrote {txns} transactions ({2 * txns} binlogs)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meta", required=True, help="meta service address(es), host:port[,host:port]")
    parser.add_argument("--txns", type=int, default=100)
    parser.add_argument("--db", default="example", help="database of the table (default: example)")
    parser.add_argument("--table", default="", help="table name (default: items_<table id>, new each run)")
    parser.add_argument(
        "--without-create", action="store_true", help="write no CREATE TABLE (to see a drainer halt)"
    )
    args = parser.parse_args()
    try:
        sys.exit(asyncio.run(main(args.meta, args.txns, args.db, args.table, args.without_create)))
    except (MetaError, PumpError) as exc:
        print(f"pump_client_example: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)

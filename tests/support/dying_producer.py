"""A producer process that dies in the middle of a two-phase transaction.

Run as ``python -m tests.support.dying_producer --meta ADDR --upstream DSN ...``:
it opens a :class:`TxnWriter` on the upstream with the real pump client, runs
``writer.ddl`` for the test table when asked (``--create``), commits
``--txns`` transactions normally (one row each, ids from ``--first-id``), and
then, with ``--die``:

- ``commit``: runs one more transaction (row ``--doomed-id``) and SIGKILLs its
  own process when handed that transaction's Commit binlog. By then the
  upstream has committed and ``bridge_txn_status`` holds its row; only the pump
  lacks the Commit.
- ``prewrite``: the same, but SIGKILLs itself right after the Prewrite binlog is
  written, before commit_ts and the upstream COMMIT: no status row, nothing
  committed upstream.
- ``none``: exits normally.

Every event is one JSON line on stdout, flushed before anything else happens:
``{"event": "committed", "id", "start_ts", "commit_ts"}`` per normal
transaction, ``{"event": "dying", "at", "id", "start_ts", "commit_ts"}`` just
before the SIGKILL (commit_ts 0 for ``prewrite``), ``{"event": "done"}`` at a
normal end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from bridge.binlog import COMMIT, PREWRITE
from bridge.producer import TxnWriter, open_upstream
from bridge.proto import binlog_pb2
from bridge.pumpclient import PumpClientConfig, PumpsClient

TABLE = "kill_test"
CREATE_TABLE = f"CREATE TABLE {TABLE} (id INT NOT NULL PRIMARY KEY, name VARCHAR(32))"


def say(**event: object) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class DyingPumps:
    """The pump client, with ``get_timestamps``/``write_binlog``, that SIGKILLs its own
    process at the armed point of the armed transaction's two-phase flow."""

    def __init__(self, pumps: PumpsClient) -> None:
        self.pumps = pumps
        self.die_at: str | None = None  # "commit" or "prewrite" once armed
        self.row_id = 0

    def arm(self, at: str, row_id: int) -> None:
        self.die_at, self.row_id = at, row_id

    def get_timestamps(self, count: int = 1) -> int:
        return self.pumps.get_timestamps(count)

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> None:
        if self.die_at == "commit" and binlog.tp == COMMIT:
            self._die(binlog)  # the upstream has committed; the Commit never reaches a pump
        self.pumps.write_binlog(binlog)
        if self.die_at == "prewrite" and binlog.tp == PREWRITE and not binlog.ddl_query:
            self._die(binlog)  # the Prewrite is on a pump; the upstream transaction is still open

    def _die(self, binlog: binlog_pb2.Binlog) -> None:
        say(
            event="dying",
            at=self.die_at,
            id=self.row_id,
            start_ts=binlog.start_ts,
            commit_ts=binlog.commit_ts,
        )
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dying_producer")
    parser.add_argument("--meta", required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--create", action="store_true", help=f"create {TABLE} through writer.ddl first")
    parser.add_argument("--txns", type=int, default=3)
    parser.add_argument("--first-id", type=int, default=1)
    parser.add_argument("--die", choices=("none", "commit", "prewrite"), default="none")
    parser.add_argument("--doomed-id", type=int, default=0)
    args = parser.parse_args(argv)

    with PumpsClient(args.meta, PumpClientConfig(write_timeout=30.0)) as client:
        pumps = DyingPumps(client)
        writer = TxnWriter(open_upstream(args.upstream), pumps)
        if args.create:
            result = writer.ddl(CREATE_TABLE)
            assert result is not None
            say(event="ddl", start_ts=result.start_ts, commit_ts=result.commit_ts)
        for row_id in range(args.first_id, args.first_id + args.txns):
            with writer.transaction() as txn:
                txn.insert(TABLE, {"id": row_id, "name": f"row {row_id}"})
            say(event="committed", id=row_id, start_ts=txn.start_ts, commit_ts=txn.commit_ts)
        if args.die != "none":
            pumps.arm(args.die, args.doomed_id)
            with writer.transaction() as txn:
                txn.insert(TABLE, {"id": args.doomed_id, "name": f"doomed at {args.die}"})
            raise AssertionError(f"transaction {txn.start_ts} finished although it should have died")
        writer.close()
    say(event="done")
    return 0


if __name__ == "__main__":
    sys.exit(main())

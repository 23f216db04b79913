"""Micro-benchmark of the row codec on a 10-column row of mixed types.

Run ``python -m bench.rowcodec [--rows N] [--repeat R]``. It encodes and then
decodes ``N`` distinct rows of a table with the column types a typical OLTP
table has (BIGINT UNSIGNED, INT, VARCHAR, nullable TEXT, DECIMAL(12,2),
DOUBLE, DATETIME(6), TIMESTAMP, ENUM, BLOB), ``R`` times, and keeps the best
pass. The last line of stdout is one JSON object: ``value`` is round trips
(encode + decode of one row) per second through :class:`bridge.rowcodec.RowCodec`;
``ceiling`` is the same with bare protobuf on values already in wire form (no
type checks, no conversions), the cost floor of the message layout itself.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec

T = row_pb2.ColumnType
COLUMNS = [
    row_pb2.Column(id=1, name="id", type=T.BIGINT, unsigned=True),
    row_pb2.Column(id=2, name="qty", type=T.INT),
    row_pb2.Column(id=3, name="name", type=T.VARCHAR, length=64),
    row_pb2.Column(id=4, name="note", type=T.TEXT, nullable=True),
    row_pb2.Column(id=5, name="price", type=T.DECIMAL, precision=12, scale=2),
    row_pb2.Column(id=6, name="score", type=T.DOUBLE),
    row_pb2.Column(id=7, name="created", type=T.DATETIME, fsp=6),
    row_pb2.Column(id=8, name="updated", type=T.TIMESTAMP),
    row_pb2.Column(id=9, name="status", type=T.ENUM, elems=["new", "paid", "shipped"]),
    row_pb2.Column(id=10, name="payload", type=T.BLOB),
]
SCHEMA = row_pb2.TableSchema(db="bench", table="orders", columns=COLUMNS)


def make_rows(count: int, seed: int = 7) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    base = datetime(2024, 1, 1)
    return [
        (
            rng.randrange(2**64),
            rng.randint(-1000, 1000),
            f"customer {rng.randrange(10**6)}",
            None if rng.random() < 0.5 else "gift wrap",
            Decimal(rng.randrange(10**9)).scaleb(-2),
            rng.random() * 100,
            base + timedelta(microseconds=rng.randrange(10**13)),
            (base + timedelta(seconds=rng.randrange(10**7))).replace(tzinfo=UTC),
            rng.choice(["new", "paid", "shipped"]),
            rng.randbytes(32),
        )
        for _ in range(count)
    ]


def wire_rows(rows: list[tuple[Any, ...]]) -> list[list[dict[str, Any]]]:
    """The rows as Datum keyword arguments, already converted: the ceiling's input."""

    def stamp(value: datetime) -> dict[str, int]:
        names = ("year", "month", "day", "hour", "minute", "second", "microsecond")
        return {name: getattr(value, name) for name in names}

    return [
        [
            {"uint_value": r[0]},
            {"int_value": r[1]},
            {"string_value": r[2]},
            {"is_null": True} if r[3] is None else {"string_value": r[3]},
            {"decimal_value": str(r[4])},
            {"double_value": r[5]},
            {"datetime_value": stamp(r[6])},
            {"datetime_value": stamp(r[7])},
            {"string_value": r[8]},
            {"bytes_value": r[9]},
        ]
        for r in rows
    ]


def best_rate(work: Callable[[], object], items: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return items / best


def measure(rows: Sequence[tuple[Any, ...]], repeat: int) -> dict[str, float]:
    codec = RowCodec(SCHEMA)
    encoded = [codec.encode(row) for row in rows]
    assert [codec.decode(data) for data in encoded] == list(rows)
    wire = wire_rows(list(rows))
    ids = [c.id for c in COLUMNS]

    def raw_encode() -> list[bytes]:
        out = []
        for datums in wire:
            row = row_pb2.Row(column_ids=ids)
            add = row.values.add
            for datum in datums:
                add(**datum)
            out.append(row.SerializeToString())
        return out

    def raw_decode() -> None:
        for data in encoded:
            for datum in row_pb2.Row.FromString(data).values:
                getattr(datum, datum.WhichOneof("value") or "is_null")

    n = len(rows)
    return {
        "encode": best_rate(lambda: [codec.encode(row) for row in rows], n, repeat),
        "decode": best_rate(lambda: [codec.decode(data) for data in encoded], n, repeat),
        "raw_encode": best_rate(raw_encode, n, repeat),
        "raw_decode": best_rate(raw_decode, n, repeat),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=20_000, help="distinct rows per pass (default 20000)")
    parser.add_argument("--repeat", type=int, default=5, help="passes; the best counts (default 5)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    rates = measure(make_rows(args.rows), args.repeat)
    for name, rate in rates.items():
        print(f"{name}: {rate:,.0f} rows/s", file=sys.stderr)
    value = 1 / (1 / rates["encode"] + 1 / rates["decode"])
    ceiling = 1 / (1 / rates["raw_encode"] + 1 / rates["raw_decode"])
    return {
        "name": "rowcodec",
        "value": round(value),
        "unit": "rows/s (encode+decode, 10 columns)",
        "ceiling": round(ceiling),
        "ratio": round(value / ceiling, 3),
        "encode_rows_per_s": round(rates["encode"]),
        "decode_rows_per_s": round(rates["decode"]),
        "raw_encode_rows_per_s": round(rates["raw_encode"]),
        "raw_decode_rows_per_s": round(rates["raw_decode"]),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    print(json.dumps(run(parser.parse_args())))

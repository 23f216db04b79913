"""The pump's payload check: the fast path accepts only what the full check accepts,
and a refused payload is refused with the full check's message."""

from __future__ import annotations

import random
import re

import pytest

from bridge.binlog import Binlog, commit, fake_binlog, parse_binlog, probe, rollback
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2
from pump.checks import full_check, read_write_payload

MT = binlog_pb2.MutationType
TS = 1 << 50


def mutation(**fields: object) -> binlog_pb2.TableMutation:
    return binlog_pb2.TableMutation(table_id=7, **fields)  # type: ignore[arg-type]


def with_unknown_sequence_value(m: binlog_pb2.TableMutation, value: int) -> bytes:
    """``m`` serialized with an extra ``sequence`` entry of an unknown enum value."""
    tag = (binlog_pb2.TableMutation.SEQUENCE_FIELD_NUMBER << 3) | 0
    return m.SerializeToString() + bytes([tag, value])


def prewrite_of(*mutations: binlog_pb2.TableMutation, raw: bytes | None = None) -> bytes:
    value = binlog_pb2.PrewriteValue(mutations=mutations).SerializeToString() if raw is None else raw
    return Binlog(tp=binlog_pb2.Prewrite, start_ts=TS, prewrite_value=value).SerializeToString()


def chunk_of(
    chunk: int, *mutations: binlog_pb2.TableMutation, raw: bytes | None = None, **fields: object
) -> bytes:
    """A PrewriteChunk (part ``chunk`` of a chunked transaction) holding ``mutations``."""
    value = binlog_pb2.PrewriteValue(mutations=mutations).SerializeToString() if raw is None else raw
    binlog = Binlog(tp=binlog_pb2.PrewriteChunk, start_ts=TS, chunk=chunk, prewrite_value=value, **fields)  # type: ignore[arg-type]
    return binlog.SerializeToString()


def raw_value(*mutation_bytes: bytes) -> bytes:
    """A PrewriteValue whose mutations are given serialized (field 2, length-delimited)."""
    out = b""
    for body in mutation_bytes:
        out += bytes([(binlog_pb2.PrewriteValue.MUTATIONS_FIELD_NUMBER << 3) | 2, len(body)]) + body
    return out


CASES: list[tuple[str, bytes]] = [
    ("insert", prewrite_of(mutation(inserted_rows=[b"a"], sequence=[MT.Insert]))),
    ("inserts", prewrite_of(mutation(inserted_rows=[b"a", b"b", b"c"], sequence=[MT.Insert] * 3))),
    ("no value", Binlog(tp=binlog_pb2.Prewrite, start_ts=TS).SerializeToString()),
    ("empty value", prewrite_of()),
    ("tp unset (a Prewrite)", Binlog(start_ts=TS).SerializeToString()),
    (
        "mixed",
        prewrite_of(
            mutation(
                inserted_rows=[b"a"],
                updated_rows=[b"o", b"n"],
                deleted_rows=[b"d"],
                sequence=[MT.Update, MT.Insert, MT.DeleteRow],
            )
        ),
    ),
    (
        "two mutations",
        prewrite_of(
            mutation(inserted_rows=[b"a"], sequence=[MT.Insert]),
            mutation(deleted_rows=[b"d"], sequence=[MT.DeleteRow]),
        ),
    ),
    ("commit", commit(TS, TS + 1).SerializeToString()),
    ("rollback", rollback(TS).SerializeToString()),
    ("probe", probe().SerializeToString()),
    (
        "ddl prewrite",
        Binlog(
            tp=binlog_pb2.Prewrite,
            start_ts=TS,
            ddl_job_id=3,
            ddl_query=b"create table t (a int)",
        ).SerializeToString(),
    ),
    ("chunk", chunk_of(1, mutation(inserted_rows=[b"a"], sequence=[MT.Insert]))),
    ("chunk 7, no mutations", chunk_of(7)),
    (
        "prewrite with chunks",
        Binlog(tp=binlog_pb2.Prewrite, start_ts=TS, chunks=3, prewrite_value=b"").SerializeToString(),
    ),
    (
        "commit with chunks",
        Binlog(tp=binlog_pb2.Commit, start_ts=TS, commit_ts=TS + 1, chunks=2).SerializeToString(),
    ),
    ("prewrite with chunks 0", Binlog(tp=binlog_pb2.Prewrite, start_ts=TS, chunks=0).SerializeToString()),
    # refused ones
    ("chunk 0", chunk_of(0)),
    ("chunk negative", chunk_of(-2)),
    ("chunk with commit_ts", chunk_of(1, commit_ts=TS + 1)),
    ("chunk with chunks", chunk_of(1, chunks=2)),
    ("chunk without start_ts", Binlog(tp=binlog_pb2.PrewriteChunk, chunk=1, commit_ts=5).SerializeToString()),
    ("chunk with ddl", chunk_of(1, ddl_job_id=3, ddl_query=b"create table t (a int)")),
    ("chunk with a broken value", chunk_of(1, raw=b"\xff\xff\xff")),
    ("chunk with a bad mutation", chunk_of(2, mutation(inserted_rows=[b"a"], sequence=[MT.DeleteRow]))),
    ("chunk on a prewrite", Binlog(tp=binlog_pb2.Prewrite, start_ts=TS, chunk=1).SerializeToString()),
    (
        "chunk on a commit",
        Binlog(tp=binlog_pb2.Commit, start_ts=TS, commit_ts=TS + 1, chunk=2).SerializeToString(),
    ),
    ("negative chunks", Binlog(tp=binlog_pb2.Prewrite, start_ts=TS, chunks=-1).SerializeToString()),
    ("chunks on a rollback", Binlog(tp=binlog_pb2.Rollback, start_ts=TS, chunks=2).SerializeToString()),
    (
        "chunks on a ddl",
        Binlog(
            tp=binlog_pb2.Prewrite, start_ts=TS, ddl_job_id=3, ddl_query=b"x", chunks=2
        ).SerializeToString(),
    ),
    ("not a binlog", b"\xff\xff\xff"),
    ("fake", fake_binlog(TS).SerializeToString()),
    ("commit not after start", Binlog(tp=binlog_pb2.Commit, start_ts=TS, commit_ts=TS).SerializeToString()),
    (
        "prewrite with commit_ts",
        Binlog(tp=binlog_pb2.Prewrite, start_ts=TS, commit_ts=TS + 1).SerializeToString(),
    ),
    (
        "rollback with commit_ts",
        Binlog(tp=binlog_pb2.Rollback, start_ts=TS, commit_ts=TS + 5).SerializeToString(),
    ),
    ("no start_ts", Binlog(tp=binlog_pb2.Commit, commit_ts=TS).SerializeToString()),
    ("negative ddl job", Binlog(tp=binlog_pb2.Prewrite, start_ts=TS, ddl_job_id=-1).SerializeToString()),
    ("ddl job without query", Binlog(tp=binlog_pb2.Prewrite, start_ts=TS, ddl_job_id=3).SerializeToString()),
    ("PreDDL", Binlog(tp=binlog_pb2.PreDDL, start_ts=TS, ddl_job_id=3, ddl_query=b"x").SerializeToString()),
    ("unknown type", Binlog(start_ts=TS).SerializeToString() + bytes([(1 << 3) | 0, 99])),
    ("value not a PrewriteValue", prewrite_of(raw=b"\xff\xff\xff")),
    (
        "schema change not one",
        Binlog(
            tp=binlog_pb2.Prewrite,
            start_ts=TS,
            ddl_job_id=3,
            ddl_query=b"x",
            ddl_schema_change=b"\xff\xff",
        ).SerializeToString(),
    ),
    ("insert without row", prewrite_of(mutation(sequence=[MT.Insert]))),
    ("row without insert", prewrite_of(mutation(inserted_rows=[b"a"]))),
    ("insert counted as delete", prewrite_of(mutation(inserted_rows=[b"a"], sequence=[MT.DeleteRow]))),
    ("two rows one insert", prewrite_of(mutation(inserted_rows=[b"a", b"b"], sequence=[MT.Insert]))),
    ("odd update images", prewrite_of(mutation(updated_rows=[b"o"], sequence=[MT.Update]))),
    (
        "inserts plus a delete id",
        prewrite_of(mutation(inserted_rows=[b"a"], deleted_ids=[1], sequence=[MT.Insert])),
    ),
    (
        "unknown mutation type",
        prewrite_of(
            raw=raw_value(
                with_unknown_sequence_value(mutation(inserted_rows=[b"a"], sequence=[MT.Insert]), 99)
            )
        ),
    ),
    (
        "commit with a broken value",
        Binlog(
            tp=binlog_pb2.Commit,
            start_ts=TS,
            commit_ts=TS + 1,
            prewrite_value=b"\xff\xff",
        ).SerializeToString(),
    ),
    (
        "rollback with a broken schema change",
        Binlog(
            tp=binlog_pb2.Rollback,
            start_ts=TS,
            ddl_schema_change=b"\xff\xff",
        ).SerializeToString(),
    ),
    (
        "good then bad mutation",
        prewrite_of(
            mutation(inserted_rows=[b"a"], sequence=[MT.Insert]),
            mutation(inserted_rows=[b"a"], sequence=[MT.Insert, MT.Insert]),
        ),
    ),
]


def outcome(check: object, payload: bytes) -> tuple[str, object]:
    try:
        return "ok", check(payload).SerializeToString()  # type: ignore[operator]
    except ProtocolError as exc:
        # bridge.binlog names an unknown group-typed field by its object repr: drop the address
        return "refused", re.sub(r" at 0x[0-9a-f]+", "", str(exc))


@pytest.mark.parametrize(("name", "payload"), CASES, ids=[name for name, _ in CASES])
def test_fast_path_agrees_with_the_full_check(name: str, payload: bytes) -> None:
    assert outcome(read_write_payload, payload) == outcome(full_check, payload)


def test_both_outcomes_are_covered() -> None:
    results = [outcome(full_check, payload)[0] for _, payload in CASES]
    assert results.count("ok") >= 15 and results.count("refused") >= 28


def test_random_byte_flips_agree() -> None:
    """Corrupt valid payloads at random positions: the same verdict and message either way."""
    rng = random.Random(16)
    seeds = [payload for name, payload in CASES[:9]] + [payload for name, payload in CASES if "chunk" in name]
    refused = 0
    for _ in range(20000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        fast, full = outcome(read_write_payload, bytes(data)), outcome(full_check, bytes(data))
        assert fast == full, bytes(data)
        refused += full[0] == "refused"
    assert refused > 100


def test_chunk_refusals_name_the_fault() -> None:
    cases = {
        "chunk 0": "a PrewriteChunk needs chunk >= 1, got 0",
        "chunk with commit_ts": "is written without commit_ts",
        "chunk on a commit": "only a PrewriteChunk carries chunk, got chunk 2 on a Commit",
        "negative chunks": "chunks must be >= 0, got -1",
        "chunks on a rollback": "only a Prewrite or Commit carries chunks",
        "chunk with ddl": "a PrewriteChunk carries no DDL fields",
        "chunks on a ddl": "a DDL is never chunked",
        "chunk with a bad mutation": "table id 7: sequence has 0 Insert entries for 1 Insert rows",
    }
    payloads = dict(CASES)
    for name, message in cases.items():
        verdict, text = outcome(read_write_payload, payloads[name])
        assert verdict == "refused" and message in str(text), (name, text)


def test_a_pulled_part_parses() -> None:
    """parse_binlog takes a part in its pulled form (commit_ts set, > start_ts); the pump does not."""
    payload = chunk_of(3, commit_ts=TS + 9)
    assert parse_binlog(payload).commit_ts == TS + 9
    with pytest.raises(ProtocolError, match="written without commit_ts"):
        read_write_payload(payload)
    with pytest.raises(ProtocolError, match="carries no commit_ts"):
        parse_binlog(chunk_of(3, commit_ts=TS - 1))

"""The snapshot marker from the binlog to the Kafka envelope: ``TableMutation.snapshot`` ->
``RowChange.snapshot`` (the drainer's decoding) -> ``op = "r"`` (the Avro envelope)."""

from __future__ import annotations

from bridge import binlog
from bridge.avro import source_record, table_avro
from bridge.binlog import TableMutationBuilder
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from drainer.sync.builder import decode_changes
from tests.unit.test_avro_tables import roundtrip

T = row_pb2.ColumnType
SCHEMA = row_pb2.TableSchema(
    table_id=7,
    db="shop",
    table="t",
    columns=[
        row_pb2.Column(id=1, name="id", type=T.INT),
        row_pb2.Column(id=2, name="v", type=T.VARCHAR, length=5, nullable=True),
    ],
    indexes=[row_pb2.Index(name="PRIMARY", primary=True, unique=True, columns=["id"])],
    max_column_id=2,
)
SOURCE = source_record(cluster_id=1, db="shop", table="t", start_ts=10, commit_ts=20, pos=0, last=True)


def _payload(snapshot: bool) -> bytes:
    codec = RowCodec(SCHEMA)
    builder = TableMutationBuilder(7)
    builder.insert(codec.encode((1, "a")))
    mutation = builder.build()
    mutation.snapshot = snapshot
    return binlog.prewrite(10, [mutation]).SerializeToString()


def test_snapshot_rows_decode_as_inserts_marked_snapshot() -> None:
    codecs = {7: RowCodec(SCHEMA)}
    (read,) = decode_changes(_payload(True), None, codecs, 20)
    (inserted,) = decode_changes(_payload(False), None, codecs, 20)
    assert (read.kind, read.after, read.snapshot) == ("insert", (1, "a"), True)
    assert (inserted.kind, inserted.snapshot) == ("insert", False)


def test_the_envelope_of_a_snapshot_row_says_r_and_decodes() -> None:
    avro = table_avro(SCHEMA)
    record = roundtrip(avro.value_schema, avro.envelope("insert", None, (1, "a"), SOURCE, 5, snapshot=True))
    assert record["op"] == "r" and record["before"] is None and record["after"] == {"id": 1, "v": "a"}
    assert avro.envelope("insert", None, (1, "a"), SOURCE, 5)["op"] == "c"

"""``bench spark``'s fair ceiling: what a user would hand-write without this project's code.

One process: a confluent-kafka consumer reads the topic's partitions, fastavro's
``schemaless_reader`` decodes each single-object-encoded value with the writer
schema found on the ``<prefix>._schemas`` topic, and each document is upserted
into tantivy by id (delete by term, then add), one commit per ``batch`` rows.
No version checks, no floors, no reduction: the least a correct-enough
hand-written indexer of an insert/update stream does.

Also here: the CPU seconds of a process tree from ``/proc`` (the Spark driver,
its JVM and the Python workers it starts), to split the driver's CPU from the
job's total.
"""

from __future__ import annotations

import io
import json
import os
import time
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import tantivy
from confluent_kafka import Consumer, TopicPartition

SINGLE_OBJECT_HEADER = 10  # 0xC3 0x01 + the schema's 8-byte fingerprint


def _schemas(bootstrap: str, topic: str) -> dict[bytes, Any]:
    """fingerprint (8 bytes, as in a message's header) -> parsed writer schema."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ceiling-{os.getpid()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: dict[bytes, Any] = {}
    while True:
        message = consumer.poll(10)
        if message is None or message.error():
            break
        key, value = message.key(), message.value()
        if key and value:
            found[bytes.fromhex(key.decode())] = fastavro.parse_schema(json.loads(value))
    consumer.close()
    return found


def _plain(value: Any) -> Any:
    """A decoded Avro value as tantivy's JSON field takes it (no Decimal, no datetime)."""
    if isinstance(value, Decimal):
        return str(value)
    return value.isoformat() if isinstance(value, datetime | date) else value


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("_id", stored=True, tokenizer_name="raw")
    builder.add_integer_field("_ts", stored=True, fast=True)
    builder.add_json_field("row", stored=True, tokenizer_name="raw")
    builder.add_text_field("text", stored=False)
    return builder.build()


def _writer(work: Path) -> Any:
    """The loop's tantivy writer: a fresh index in ``work``, one indexing thread, 128 MiB heap."""
    return tantivy.Index(_schema(), path=str(work)).writer(heap_size=128 * 1024 * 1024, num_threads=1)


def _envelope(value: bytes, schemas: dict[bytes, Any]) -> Any:
    """A single-object-encoded message value decoded with its writer schema."""
    header = SINGLE_OBJECT_HEADER
    return fastavro.schemaless_reader(io.BytesIO(value[header:]), schemas[value[2:header]], None)


def _after(envelope: Any) -> dict[str, Any]:
    """The after image as tantivy's JSON field takes it (nulls left out)."""
    return {k: _plain(v) for k, v in (envelope["after"] or {}).items() if v is not None}


def _document(envelope: Any, after: dict[str, Any]) -> tuple[str, tantivy.Document]:
    """The change's document id and document."""
    doc_id = f"bench/orders/{after['id']}"
    document = tantivy.Document(_id=doc_id, _ts=envelope["source"]["commit_ts"], row=after,
                                text=str(after.get("sku", "")))  # fmt: skip
    return doc_id, document


def measure(bootstrap: str, topic: str, partitions: int, rows: int, batch: int, work: Path) -> float:
    """Rows/s of the hand-written loop over the first ``rows`` messages of ``topic``."""
    began = time.perf_counter()
    work.mkdir(parents=True, exist_ok=True)
    schemas = _schemas(bootstrap, topic.split(".", 1)[0] + "._schemas")
    writer = _writer(work)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ceiling-{os.getpid()}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 20})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = pending = 0
    while seen < rows:
        for message in consumer.consume(10_000, timeout=1.0):
            value = message.value()
            if message.error() or not value:
                continue
            envelope = _envelope(value, schemas)
            doc_id, document = _document(envelope, _after(envelope))
            writer.delete_documents_by_term("_id", doc_id)
            writer.add_document(document)
            seen += 1
            pending += 1
            if pending >= batch:
                writer.commit()
                pending = 0
    writer.commit()
    writer.wait_merging_threads()
    consumer.close()
    return rows / (time.perf_counter() - began)


def stage_costs(bootstrap: str, topic: str, partitions: int, sample: int, work: Path) -> dict[str, float]:
    """CPU µs per change of each step of :func:`measure`'s loop, each timed alone over the first
    ``sample`` messages of ``topic`` (read before timing; untimed, not part of the ceiling's rate):
    ``decode`` (fastavro's schemaless reader), ``convert`` (the row as tantivy's JSON field takes
    it), ``document`` (its id and the ``tantivy.Document``), ``delete`` and ``add`` (the writer's calls),
    ``commit`` (one commit of them all, its threads included: process CPU). Where a hand-written
    loop spends its time on this machine, against which a job's CPU per change compares."""
    work.mkdir(parents=True, exist_ok=True)
    schemas = _schemas(bootstrap, topic.split(".", 1)[0] + "._schemas")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"stages-{os.getpid()}",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    while len(values) < sample:
        batch = consumer.consume(10_000, timeout=5.0)
        if not batch:
            break
        values += [v for m in batch if not m.error() and (v := m.value())]
    consumer.close()
    values = values[:sample]
    count = max(len(values), 1)
    costs: dict[str, float] = {}

    def timed(name: str, step: Any) -> Any:
        began = time.process_time()
        result = step()
        costs[name] = round((time.process_time() - began) / count * 1e6, 2)
        return result

    envelopes = timed("decode", lambda: [_envelope(v, schemas) for v in values])
    rows = timed("convert", lambda: [_after(e) for e in envelopes])
    documents = timed("document", lambda: [_document(e, r) for e, r in zip(envelopes, rows, strict=True)])
    writer = _writer(work)
    timed("delete", lambda: [writer.delete_documents_by_term("_id", i) for i, _ in documents])
    timed("add", lambda: [writer.add_document(d) for _, d in documents])

    def commit() -> None:
        writer.commit()
        writer.wait_merging_threads()

    timed("commit", commit)
    costs["sum"] = round(sum(costs.values()), 2)
    costs["sample"] = len(values)
    return costs


def tree_cpu_seconds(root: int) -> dict[int, float]:
    """pid -> user+system CPU seconds of ``root`` and every live descendant (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return {pid: cpu[pid] for pid in tree if pid in cpu}

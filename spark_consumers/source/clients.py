"""The data source's options, validated once on the driver, and a Python worker's Kafka clients
(kept across tasks). Apart from :mod:`~spark_consumers.source.datasource` so that the index job's
tasks (:mod:`spark_consumers.index.tasks`, :mod:`spark_consumers.index.direct`) use them without
importing the data source that plans them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer

from bridge.errors import ConfigError
from spark_consumers.decode import SCHEMAS_SUFFIX, ChangeDecoder, registry_client
from spark_consumers.source import kafka

ROW_FORMS = ("json", "latest", "index")


@dataclass(frozen=True)
class SourceOptions:
    """The options a reader needs, validated once on the driver (errors name the option)."""

    bootstrap: str
    topics: tuple[str, ...]
    with_ddl: bool = True
    ddl_wait: bool = True  # ddl.wait=resolved: a DDL event waits for a watermark at or past it
    registry_url: str = ""
    schemas_topic: str = ""
    schemas_wait: float = 10.0
    max_offsets: int = 0
    starting: str = "earliest"
    ending: str = "latest"
    kafka_settings: tuple[tuple[str, str], ...] = ()  # a tuple: options are a cache key
    rows: str = "json"  # "latest": compact rows, the latest change per document of each range
    index_path: str = ""  # rows=index: the index the shard tasks write
    text_fields: str = ""  # rows=index: JSON {"db.table": [columns]}

    @property
    def kafka(self) -> dict[str, str]:
        return dict(self.kafka_settings)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}
        bootstrap = opts.get("bootstrap.servers", "")
        topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
        if not bootstrap:
            raise ConfigError("bootstrap.servers: required")
        if not topics:
            raise ConfigError("topics: required (names or globs, comma-separated)")
        try:
            wait = float(opts.get("schemas.wait", "10"))
            limit = int(opts.get("maxoffsetspertrigger", "0"))
        except ValueError as exc:
            raise ConfigError(f"schemas.wait / maxOffsetsPerTrigger: not a number: {exc}") from None
        rows = opts.get("rows", "json").lower()
        ddl_wait = opts.get("ddl.wait", "resolved").lower()
        if ddl_wait not in ("resolved", "none"):
            raise ConfigError(f"ddl.wait: {ddl_wait!r} is not one of resolved, none")
        if rows not in ROW_FORMS:
            raise ConfigError(f"rows: {rows!r} is not one of {', '.join(ROW_FORMS)}")
        if rows == "index" and not opts.get("index.path"):
            raise ConfigError("index.path: required with rows=index")
        return cls(
            rows=rows,
            index_path=opts.get("index.path", ""),
            text_fields=opts.get("index.text_fields", ""),
            bootstrap=bootstrap,
            topics=topics,
            with_ddl=opts.get("ddl", "true").lower() != "false",
            ddl_wait=ddl_wait == "resolved",
            registry_url=opts.get("schema.registry.url", ""),
            schemas_topic=opts.get("schemas.topic", ""),
            schemas_wait=wait,
            max_offsets=limit,
            starting=opts.get("startingoffsets", "earliest"),
            ending=opts.get("endingoffsets", "latest"),
            kafka_settings=tuple(sorted((k[6:], v) for k, v in opts.items() if k.startswith("kafka."))),
        )

    def schemas_topic_of(self, topic: str) -> str:
        return self.schemas_topic or topic.split(".", 1)[0] + SCHEMAS_SUFFIX


class _WorkerClients:
    """A Python worker's consumer and decoder for one set of options, kept across tasks: Spark
    reuses its Python workers (``spark.python.worker.reuse``), and making a consumer, connecting
    and reading the schemas topic cost about a second per task, more than most ranges take."""

    def __init__(self, options: SourceOptions, schemas_topic: str) -> None:
        self.schema_topic: kafka.SchemaTopic | None = None
        if options.registry_url:
            self.decoder = ChangeDecoder(registry_client(options.registry_url), {})
        else:
            self.schema_topic = kafka.SchemaTopic(
                options.bootstrap, schemas_topic, options.schemas_wait, options.kafka
            )
            self.decoder = ChangeDecoder(None, self.schema_topic.lookup)
        self.consumer = Consumer(kafka.consumer_config(options.bootstrap, options.kafka))

    def close(self) -> None:
        self.consumer.close()
        if self.schema_topic is not None:
            self.schema_topic.close()


_CLIENTS: dict[tuple[SourceOptions, str], _WorkerClients] = {}


def _clients(options: SourceOptions, topic: str) -> _WorkerClients:
    key = (options, options.schemas_topic_of(topic))
    found = _CLIENTS.get(key)
    if found is None:
        found = _CLIENTS[key] = _WorkerClients(options, key[1])
    return found

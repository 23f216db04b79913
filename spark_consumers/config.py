"""Job settings: flags, or a TOML file whose keys are the flags' names (``--config job.toml``).

Flags given on the command line win over the file. Keys are checked by
:func:`bridge.config.build` as every other config of the project: a misspelled
key is refused with a hint (``chekpoint: unknown key (did you mean
'checkpoint'?)``), durations take the one grammar (``500ms``, ``2s``, ``1m``),
errors name the key (``index: required``).

::

    bootstrap-servers = "kafka:9092"
    topics = ["bridge.shop.*"]
    schema-registry-url = ""            # empty: single-object encoding (the _schemas topic)
    index = "/data/index"
    checkpoint = "/data/checkpoints/index"
    trigger-interval = "2s"             # or available-now = true
    max-offsets-per-trigger = 200000
    master = "local[2]"
    index-mode = "direct"               # or "shuffle" (see docs/spark-consumers.md)

    [text-fields]                       # full-text columns per table (default: every string column)
    "shop.products" = ["title", "description"]

    [kafka]                             # librdkafka settings of the consumers
    "security.protocol" = "SASL_SSL"
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bridge.config import build, parse_duration
from bridge.errors import ConfigError

__all__ = ["DEFAULT_MAX_OFFSETS", "JobConfig", "JobSettings", "build_config", "load_toml", "parse_duration"]

# the snapshot job collects a micro-batch on the driver: bound it by default (0 = no bound)
DEFAULT_MAX_OFFSETS = 200_000
FREE_TABLES = ("text-fields", "kafka", "spark")  # tables whose keys are the user's, not ours


@dataclass
class JobSettings:
    """The keys of a job's TOML file (and flags), as :func:`bridge.config.build` checks them."""

    bootstrap_servers: str = field(default="", metadata={"help": "Kafka bootstrap servers (required)"})
    topics: list[str] | str = field(
        default_factory=list, metadata={"help": "topic names or globs; a list or comma-separated (required)"}
    )
    schema_registry_url: str = field(
        default="", metadata={"help": "Confluent wire format; empty: single-object"}
    )
    index: str = field(default="", metadata={"help": "the index folder (index job)"})
    snapshot: str = field(default="", metadata={"help": "the snapshot folder (snapshot job)"})
    checkpoint: str = field(default="", metadata={"help": "Spark's checkpoint folder (required)"})
    trigger_interval: float = field(default=2.0, metadata={"duration": True, "help": "micro-batch interval"})
    available_now: bool = field(default=False, metadata={"help": "apply what is there now, then stop"})
    max_offsets_per_trigger: int = field(
        default=DEFAULT_MAX_OFFSETS, metadata={"help": "offsets per micro-batch; 0: no bound"}
    )
    master: str = field(default="local[2]", metadata={"help": "Spark master: local[2], spark://host:7077"})
    shards: int = field(
        default=0,
        metadata={
            "help": "index shards at creation; 0: the topics' partitions (direct), Spark's parallelism"
        },
    )
    index_mode: Literal["direct", "shuffle"] = field(
        default="direct",
        metadata={"help": "direct: shard tasks read their Kafka partitions; shuffle: rows through Spark"},
    )
    source: Literal["python", "kafka"] = field(
        default="python", metadata={"help": "python: this project's data source; kafka: Spark's own"}
    )

    def validate(self) -> None:
        if self.max_offsets_per_trigger < 0 or self.shards < 0:
            raise ConfigError("max-offsets-per-trigger / shards: cannot be negative")


@dataclass
class JobConfig:
    """One job's settings (``kind``: index or snapshot; ``output``: the index or snapshot folder)."""

    kind: str
    bootstrap_servers: str
    topics: list[str]
    output: Path
    checkpoint: Path
    schema_registry_url: str = ""
    available_now: bool = False
    trigger_interval: float = 2.0
    max_offsets_per_trigger: int = 0
    master: str = "local[2]"
    shards: int = 0  # index shards when the index is created; 0: the session's default parallelism
    source: str = "python"
    index_mode: str = "direct"  # direct: shard i reads partition i of the topics; shuffle: rows through Spark
    text_fields: dict[str, list[str]] = field(default_factory=dict)
    kafka: dict[str, str] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)

    def source_options(self) -> dict[str, str]:
        options = {"bootstrap.servers": self.bootstrap_servers, "topics": ",".join(self.topics)}
        if self.schema_registry_url:
            options["schema.registry.url"] = self.schema_registry_url
        if self.max_offsets_per_trigger > 0:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        options.update({f"kafka.{k}": str(v) for k, v in self.kafka.items()})
        return options


def load_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"--config {path}: {exc}") from None


def _table(settings: dict[str, Any], key: str) -> dict[str, Any]:
    value = settings.pop(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: must be a table [{key}]")
    return value


def build_config(kind: str, flags: dict[str, Any], file_settings: dict[str, Any]) -> JobConfig:
    """Flags (argparse names with ``-``) over the file's settings; checks keys, values, what is required."""
    merged = {**file_settings, **{k: v for k, v in flags.items() if v is not None}}
    free = {key: _table(merged, key) for key in FREE_TABLES}
    settings = build(JobSettings, merged)
    output_key = "index" if kind == "index" else "snapshot"
    for key in ("bootstrap-servers", "topics", output_key, "checkpoint"):
        if not getattr(settings, key.replace("-", "_")):
            raise ConfigError(f"{key}: required (flag --{key} or the --config file)")
    topics = settings.topics
    topics = [t.strip() for t in topics.split(",") if t.strip()] if isinstance(topics, str) else topics
    return JobConfig(
        kind=kind,
        bootstrap_servers=settings.bootstrap_servers,
        topics=topics,
        output=Path(getattr(settings, output_key)),
        checkpoint=Path(settings.checkpoint),
        schema_registry_url=settings.schema_registry_url,
        available_now=settings.available_now,
        trigger_interval=settings.trigger_interval,
        max_offsets_per_trigger=settings.max_offsets_per_trigger,
        master=settings.master,
        shards=settings.shards,
        source=settings.source,
        index_mode=settings.index_mode,
        text_fields={str(t): [str(c) for c in cols] for t, cols in free["text-fields"].items()},
        kafka={str(k): str(v) for k, v in free["kafka"].items()},
        spark_conf={str(k): str(v) for k, v in free["spark"].items()},
    )

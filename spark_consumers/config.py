"""Job settings: flags, or a TOML file whose keys are the flags' names (``--config job.toml``).

Flags given on the command line win over the file. Errors name the key
(``index: required``, ``trigger-interval: not a duration``).

::

    bootstrap-servers = "kafka:9092"
    topics = ["bridge.shop.*"]
    schema-registry-url = ""            # empty: single-object encoding (the _schemas topic)
    index = "/data/index"
    checkpoint = "/data/checkpoints/index"
    trigger-interval = "2s"             # or available-now = true
    max-offsets-per-trigger = 200000
    master = "local[2]"

    [text-fields]                       # full-text columns per table (default: every string column)
    "shop.products" = ["title", "description"]

    [kafka]                             # librdkafka settings of the consumers
    "security.protocol" = "SASL_SSL"
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.errors import ConfigError

# a micro-batch is collected on the driver: bound it by default (0 = no bound)
DEFAULT_MAX_OFFSETS = 200_000
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def parse_duration(text: str, key: str) -> float:
    found = _DURATION.match(str(text))
    if found is None:
        raise ConfigError(f"{key}: not a duration like 2s or 500ms: {text!r}")
    return float(found.group(1)) * _UNITS[found.group(2)]


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
    source: str = "python"
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
    value = settings.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: must be a table")
    return value


def build_config(kind: str, flags: dict[str, Any], file_settings: dict[str, Any]) -> JobConfig:
    """Flags (argparse names with ``-``) over the file's settings; checks what is required."""
    merged = {**file_settings, **{k: v for k, v in flags.items() if v is not None}}
    output_key = "index" if kind == "index" else "snapshot"
    for key in ("bootstrap-servers", "topics", output_key, "checkpoint"):
        if not merged.get(key):
            raise ConfigError(f"{key}: required (flag --{key} or the --config file)")
    topics = merged["topics"]
    topics = [t.strip() for t in topics.split(",")] if isinstance(topics, str) else [str(t) for t in topics]
    text_fields = {str(t): [str(c) for c in cols] for t, cols in _table(merged, "text-fields").items()}
    interval = merged.get("trigger-interval", "2s")
    try:
        max_offsets = int(merged.get("max-offsets-per-trigger", DEFAULT_MAX_OFFSETS))
    except (TypeError, ValueError):
        raise ConfigError("max-offsets-per-trigger: not an integer") from None
    source = str(merged.get("source", "python"))
    if source not in ("python", "kafka"):
        raise ConfigError(f"source: python or kafka, not {source!r}")
    return JobConfig(
        kind=kind,
        bootstrap_servers=str(merged["bootstrap-servers"]),
        topics=topics,
        output=Path(merged[output_key]),
        checkpoint=Path(merged["checkpoint"]),
        schema_registry_url=str(merged.get("schema-registry-url") or ""),
        available_now=bool(merged.get("available-now", False)),
        trigger_interval=parse_duration(interval, "trigger-interval"),
        max_offsets_per_trigger=max_offsets,
        master=str(merged.get("master", "local[2]")),
        source=source,
        text_fields=text_fields,
        kafka={str(k): str(v) for k, v in _table(merged, "kafka").items()},
        spark_conf={str(k): str(v) for k, v in _table(merged, "spark").items()},
    )

"""docs/examples/drainer-kafka.toml loads through the drainer's config loader and builds the kafka sink.

Constructing the sink checks its table (:class:`KafkaSinkConfig` and the producer settings) without
connecting: the producer and the admin client are made only at ``open``, so no broker is needed.
"""

from __future__ import annotations

import re
from pathlib import Path

from bridge.config import build
from bridge.kafkaclient import redacted
from bridge.sink.registry import build_sink
from drainer.config import load_config
from drainer.sinks.kafka.config import KafkaSinkConfig
from drainer.sinks.kafka.sink import KafkaSink

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "drainer-kafka.toml"


def test_the_example_loads_and_builds_the_kafka_sink(tmp_path: Path) -> None:
    config = load_config(EXAMPLE, {"data-dir": str(tmp_path)})
    assert config.sink.types == ["kafka"] and config.checkpoint.type == "file"
    table = config.sink.tables["kafka"]

    plain = {k: v for k, v in table.items() if k not in ("producer", "schema-registry")}
    checked = build(KafkaSinkConfig, plain, prefix="sink.kafka.")
    assert checked.bootstrap_servers == "127.0.0.1:19092"  # the broker scripts/services starts
    assert (checked.partitions, checked.partition_by, checked.oversize) == (3, "key", "fail")
    assert (checked.linger, checked.delivery_timeout) == (0.05, 120.0)

    sink = build_sink(config.sink.types, config.sink.tables, tmp_path)
    assert isinstance(sink, KafkaSink)
    assert sink.config == checked  # the subtables are empty in the example: nothing else differs
    assert sink.single_object and sink.names.ddl == "bridge._ddl" and sink.names.schemas == "bridge._schemas"
    assert sink.names.table("shop", "orders") == "bridge.shop.orders"


def test_the_commented_security_settings_are_accepted_and_their_secrets_redacted(tmp_path: Path) -> None:
    # The example's commented client settings, uncommented: settings the sink passes on.
    text = re.sub(r'^# (?="(sasl|security|ssl|basic)\.)', "", EXAMPLE.read_text(), flags=re.MULTILINE)
    uncommented = tmp_path / "drainer-kafka.toml"
    uncommented.write_text(text)
    config = load_config(uncommented, {"data-dir": str(tmp_path)})
    sink = KafkaSink(config.sink.tables["kafka"], tmp_path)
    assert sink.config.producer["security.protocol"] == "SASL_SSL"
    assert sink.config.schema_registry == {"basic.auth.user.info": "user:password"}
    settings = sink.producer_settings()
    assert settings["sasl.username"] == "bridge" and settings["enable.idempotence"] is True
    assert redacted(settings)["sasl.password"] == "<redacted>"

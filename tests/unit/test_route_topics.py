"""[[sink.kafka.topic-route]] (drainer.sinks.kafka.topicroute): topic names by route rules, config errors
naming the rule, and the kafka sink's TopicNames using them before topic-template."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.errors import ConfigError
from drainer.sinks.kafka.config import load_config
from drainer.sinks.kafka.topics import TopicNames, sanitize


def names(*rules: dict[str, Any], prefix: str = "bridge") -> TopicNames:
    config = load_config(
        {"bootstrap-servers": "127.0.0.1:9092", "prefix": prefix, "topic-route": list(rules)}
    )
    return TopicNames(config.prefix, config.topic_template, config.topic_router)


def test_the_first_matching_rule_names_the_topic_else_the_template() -> None:
    topics = names(
        {"schema-pattern": "main", "table-pattern": "order?", "topic": "{prefix}.sales.{table}"},
        {"schema-pattern": "shop_*", "topic": "{prefix}.{schema}-{table}"},
    )
    assert topics.table("main", "orders") == "bridge.sales.orders"
    assert topics.table("MAIN", "Order1") == "bridge.sales.Order1"  # patterns ignore case
    assert topics.table("main", "order_items") == "bridge.main.order_items"  # no rule: topic-template
    assert topics.table("shop_1", "a b") == "bridge.shop_1-a_b"  # names sanitized as the template's
    assert sanitize("a b") == "a_b"


def test_one_table_rule_may_name_a_fixed_topic() -> None:
    assert (
        names({"schema-pattern": "main", "table-pattern": "audit", "topic": "audit-log"}).table(
            "main", "audit"
        )
        == "audit-log"
    )


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"schema-pattern": "main"}, r"sink\.kafka\.topic-route\[0\]\.topic: required"),
        ({"topic": "x.{table}"}, r"topic-route\[0\]\.schema-pattern: required"),
        (
            {"schema-pattern": "m", "topic": "x.{db}.{table}"},
            r"topic-route\[0\]\.topic: unknown placeholder \{db\}",
        ),
        ({"schema-pattern": "m", "topic": "x y.{table}"}, r"topic-route\[0\]\.topic: the text around"),
        ({"schema-pattern": "m", "topic": "{prefix}._ddl"}, r"names the sink's DDL or schemas topic"),
        ({"schema-pattern": "m", "topic": "one"}, r"table-pattern '\*' can match several names.*\{table\}"),
        ({"schema-pattern": "m*", "table-pattern": "t", "topic": "x.t"}, r"schema-pattern 'm\*'.*\{schema\}"),
        ({"schema-pattern": "m", "topik": "x"}, r"topic-route\[0\]\.topik: unknown key"),
    ],
)
def test_config_errors_name_the_rule(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        names(rule)

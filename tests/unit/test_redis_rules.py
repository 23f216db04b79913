"""Rules and key templates of the redis sink: patterns, fields, {pk}, errors naming rule, table and field,
and which DDLs leave which keys stale."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.errors import ConfigError
from bridge.proto import row_pb2
from drainer.sinks.redis.config import load_config
from drainer.sinks.redis.ddl import stale_keys
from drainer.sinks.redis.rules import Rules, TableRule, Template

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange


def schema(
    table: str = "users",
    db: str = "shop",
    columns: tuple[tuple[str, int], ...] = (("id", T.BIGINT), ("email", T.VARCHAR), ("region", T.CHAR)),
    key: tuple[str, ...] = ("id",),
) -> row_pb2.TableSchema:
    out = row_pb2.TableSchema(table_id=1, db=db, table=table)
    for n, (name, kind) in enumerate(columns, 1):
        out.columns.add(id=n, name=name, type=kind, nullable=name not in key)
    if key:
        out.indexes.add(name="PRIMARY", primary=True, unique=True, columns=list(key))
    return out


def rules(*entries: dict[str, Any], **settings: Any) -> Rules:
    config = load_config({**settings, "rules": list(entries)})
    return Rules(config.rules, config.key_separator, config.null_token)


def test_templates_render_columns_meta_fields_and_nulls() -> None:
    [rule] = rules({"keys": ["user:{id}", "user:email:{email}", "{db}/{table}/{pk}", "r:{REGION}"]}).plan(
        schema()
    )
    assert rule.render_keys((42, "a@b.c", None)) == ["user:42", "user:email:a@b.c", "shop/users/42", "r:null"]


def test_composite_keys_join_with_the_separator() -> None:
    table = schema(columns=(("a", T.INT), ("b", T.VARCHAR), ("c", T.INT)), key=("a", "b"))
    [rule] = rules({}).plan(table)
    assert rule.render_keys((1, "x", 9)) == ["shop:users:1:x"]
    [rule] = rules({}, **{"key-separator": "|", "null-token": "-"}).plan(table)
    assert rule.render_keys((1, "x", 9)) == ["shop:users:1|x"]


def test_col_prefix_reaches_a_column_named_like_a_meta_field_and_braces_escape() -> None:
    table = schema(columns=(("id", T.INT), ("table", T.VARCHAR)))
    [rule] = rules({"keys": ["{{{col:table}}}:{table}"]}).plan(table)
    assert rule.render_keys((1, "t1")) == ["{t1}:users"]


def test_patterns_select_tables_and_every_matching_rule_applies() -> None:
    configured = rules(
        {"db": "shop", "table": "users", "keys": ["user:{id}"]},
        {"db": "SHOP", "table": "/us.*/", "keys": ["re:{id}"]},
        {"db": "other", "keys": ["never:{id}"]},
        {},
    )
    planned = configured.plan(schema())
    assert [r.rule.index for r in planned] == [0, 1, 3]
    assert configured.plan(schema(table="orders"))[0].rule.index == 3
    assert [r.rule.index for r in configured.plan(schema(table="Users"))] == [0, 3]  # regex is case-sensitive


def test_channel_and_stream_templates_take_db_and_table() -> None:
    [rule] = rules({"channel": "ch:{db}.{table}", "stream": "s:{table}"}).plan(schema())
    assert (rule.channel, rule.stream) == ("ch:shop.users", "s:users")
    with pytest.raises(ConfigError, match=r"sink.redis.rules\[0\].channel: .*unknown placeholder \{id\}"):
        rules({"channel": "c:{id}"})


@pytest.mark.parametrize(
    ("template", "message"),
    [("k:{id!r}", "no format spec"), ("k:{}", "empty placeholder"), ("k:{id", "braces"), ("", "empty")],
)
def test_malformed_templates_name_the_key(template: str, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"sink.redis.rules\[0\].keys\[0\]: .*{message}"):
        rules({"keys": [template]})


def test_a_missing_field_names_rule_table_field_and_fix() -> None:
    configured = rules({"db": "shop", "table": "users", "keys": ["user:{id}", "user:email:{email}"]})
    without_email = schema(columns=(("id", T.BIGINT), ("region", T.CHAR)))
    with pytest.raises(ConfigError) as raised:
        configured.plan(without_email, " after the DDL at commit_ts 99")
    text = str(raised.value)
    for part in ("sink.redis.rules[0]", "'user:email:{email}'", "{email}", "shop.users", "no column 'email'",
                 "commit_ts 99", "fix the rule"):  # fmt: skip
        assert part in text, text


def test_pk_on_a_keyless_table_fails_a_named_rule_and_skips_a_pattern_rule() -> None:
    keyless = schema(table="events", key=())
    assert rules({"table": "*"}).plan(keyless) == ()
    with pytest.raises(ConfigError, match=r"rules\[0\].*shop.events has neither a primary key"):
        rules({"db": "shop", "table": "events"}).plan(keyless)


def test_scan_patterns_escape_glob_characters() -> None:
    [rule] = rules({"keys": ["u[*]:{id}:x?", "{db}:{table}:{pk}"]}).plan(schema())
    assert [key.pattern() for key in rule.keys] == ["u\\[\\*\\]:*:x\\?", "shop:users:*"]
    assert Template.parse("a:{db}", "k", ("db",)).meta("d", "t") == "a:d"


def plan(configured: Rules, table: row_pb2.TableSchema) -> tuple[TableRule, ...]:
    return configured.plan(table)


def test_removing_ddls_make_every_owned_key_stale_but_not_publish_or_stream_rules() -> None:
    configured = rules({"keys": ["u:{id}"]}, {"keys": ["p:{id}"], "modes": ["publish", "stream"]})
    users = schema()
    for kind in (Change.TRUNCATE_TABLE, Change.DROP_TABLE, Change.RENAME_TABLE, Change.DROP_DATABASE):
        stale = stale_keys(kind, plan(configured, users), (), users, None)
        assert [key.template for key in stale] == ["u:{id}"]
    assert stale_keys(Change.CREATE_TABLE, (), plan(configured, users), None, users) == []


def test_alter_table_makes_keys_stale_only_when_their_rendering_changes() -> None:
    configured = rules({"keys": ["u:{id}", "e:{email}"]}, {"keys": ["c:{id}"], "modes": ["upsert"]})
    users = schema()
    added = schema(columns=(("extra", T.INT), ("id", T.BIGINT), ("email", T.VARCHAR), ("region", T.CHAR)))
    retyped = schema(columns=(("id", T.BIGINT), ("email", T.TEXT), ("region", T.CHAR)))

    def stale(after: row_pb2.TableSchema) -> list[str]:
        keys = stale_keys(Change.ALTER_TABLE, plan(configured, users), plan(configured, after), users, after)
        return [key.template for key in keys]

    assert stale(users) == []
    assert stale(added) == ["c:{id}"]  # a new column: cached upsert images lack it
    assert stale(retyped) == ["e:{email}", "c:{id}"]

"""[sink.redis] parsing: defaults, fixed names, every error naming its key, secrets kept out of logs."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from bridge.errors import ConfigError
from drainer.sinks.redis.config import DEFAULT_KEY, load_config, safe_url

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_give_one_invalidating_rule_for_every_table() -> None:
    config = load_config({})
    assert config.url == "redis://127.0.0.1:6379/0" and config.database() == 0
    assert config.password_env == "BRIDGE_REDIS_PASSWORD"
    assert not config.cluster and config.unlink
    [rule] = config.rules
    assert (rule.db, rule.table, rule.keys, rule.modes) == ("*", "*", [DEFAULT_KEY], ["invalidate"])


def test_the_fixed_names_of_the_brief_parse() -> None:
    table = tomllib.loads(
        """
        url = "redis://redis:6379/3"
        password-env = "MY_REDIS_PASSWORD"
        cluster = false
        [[rules]]
        db = "shop"
        table = "users"
        keys = ["user:{id}", "user:email:{email}"]
        modes = ["invalidate", "publish"]
        [[rules]]
        table = "/order_.*/"
        modes = ["stream"]
        stream-maxlen = 1000
        """
    )
    config = load_config(table)
    assert config.database() == 3
    assert [r.table for r in config.rules] == ["users", "/order_.*/"]
    assert config.rules[0].keys == ["user:{id}", "user:email:{email}"]
    assert config.rules[1].stream_maxlen == 1000


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"url": "http://x:1"}, "sink.redis.url"),
        ({"url": "unix://"}, "sink.redis.url"),
        ({"url": "redis://h:1/x"}, "sink.redis.url"),
        ({"pool-size": 0}, "sink.redis.pool-size"),
        ({"batch-commands": 0}, "sink.redis.batch-commands"),
        ({"del-batch-keys": 0}, "sink.redis.del-batch-keys"),
        ({"timeout": "1ms"}, "sink.redis.timeout"),
        ({"batch-interval": "1m"}, "sink.redis.batch-interval"),
        ({"key-separator": ""}, "sink.redis.key-separator"),
        ({"cluster": True, "db": 2}, "sink.redis.db"),
        ({"cluster": True, "url": "unix:///tmp/s"}, "sink.redis.cluster"),
        ({"cluster-nodes": ["h:1"]}, "sink.redis.cluster-nodes"),
        ({"cluster": True, "cluster-nodes": ["nope"]}, "sink.redis.cluster-nodes[0]"),
        ({"tls-ca-file": "/ca.pem"}, "sink.redis.tls-ca-file"),
        ({"url": "rediss://h:1", "tls-cert-file": "/c.pem"}, "sink.redis.tls-key-file"),
        ({"unlnk": True}, "sink.redis.unlnk"),
        ({"rules": {"db": "x"}}, "sink.redis.rules"),
        ({"rules": ["x"]}, "sink.redis.rules[0]"),
        ({"rules": [{"modes": ["evict"]}]}, "sink.redis.rules[0].modes"),
        ({"rules": [{"modes": []}]}, "sink.redis.rules[0].modes"),
        ({"rules": [{}, {"modes": ["invalidate", "upsert"]}]}, "sink.redis.rules[1].modes"),
        ({"rules": [{"keys": [], "modes": ["upsert"]}]}, "sink.redis.rules[0].keys"),
        ({"rules": [{"keys": "user:{id}"}]}, "sink.redis.rules[0].keys"),
        ({"rules": [{"stream-maxlen": -1}]}, "sink.redis.rules[0].stream-maxlen"),
        ({"rules": [{"stream-maxlen": 5, "stream-max-age": "1h"}]}, "sink.redis.rules[0].stream-max-age"),
        ({"rules": [{"publish-per": "table"}]}, "sink.redis.rules[0].publish-per"),
        ({"rules": [{"upsert-format": "xml"}]}, "sink.redis.rules[0].upsert-format"),
        ({"rules": [{"tabel": "x"}]}, "sink.redis.rules[0].tabel"),
    ],
)
def test_errors_name_the_key(table: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(table)
    assert str(raised.value).startswith(f"{key}:"), str(raised.value)


def test_database_from_the_url_query_and_the_db_key() -> None:
    assert load_config({"url": "unix:///run/redis.sock?db=4"}).database() == 4
    assert load_config({"url": "redis://h:1/5", "db": 6}).database() == 6
    assert load_config({"url": "redis://h:1"}).database() == 0


def test_password_from_key_url_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_REDIS_PASSWORD", "from-env")
    assert load_config({}).auth() == (None, "from-env")
    assert load_config({"url": "redis://u:in-url@h:1/0"}).auth() == ("u", "in-url")
    assert load_config({"password": "in-key", "username": "me"}).auth() == ("me", "in-key")
    monkeypatch.setenv("OTHER", "other")
    assert load_config({"password-env": "OTHER"}).auth() == (None, "other")
    monkeypatch.delenv("BRIDGE_REDIS_PASSWORD")
    assert load_config({}).auth() == (None, None)


def test_logged_urls_hide_the_password() -> None:
    assert safe_url("redis://user:s3cret@host:6379/0") == "redis://user:***@host:6379/0"
    assert safe_url("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert safe_url("redis://host:6379/0") == "redis://host:6379/0"
    assert "s3cret" not in safe_url("rediss://a:s3cret@h:1")


def test_the_example_loads_through_the_drainer_and_builds_the_sink(tmp_path: Path) -> None:
    from bridge.sink.registry import build_sink
    from drainer.config import load_config as load_drainer_config
    from drainer.sinks.redis import RedisSink

    config = load_drainer_config(
        ROOT / "docs" / "examples" / "drainer-redis.toml", {"data-dir": str(tmp_path)}
    )
    assert config.sink.types == ["redis"]
    sink = build_sink(config.sink.types, config.sink.tables, tmp_path)  # checks every key, connects nowhere
    assert isinstance(sink, RedisSink)
    assert sink.config.checkpoint_key and len(sink.rules.rules) == 4
    assert [rule.config.modes for rule in sink.rules.rules][1] == ["invalidate", "publish"]


def test_every_key_is_documented_in_the_guide() -> None:
    import dataclasses

    from bridge.config import toml_key
    from drainer.sinks.redis.config import RedisSinkConfig, RuleConfig

    guide = (ROOT / "docs" / "redis-sink.md").read_text()
    for cls in (RedisSinkConfig, RuleConfig):
        for field in dataclasses.fields(cls):
            assert f"`{toml_key(field.name)}`" in guide, f"docs/redis-sink.md lacks {toml_key(field.name)}"


def test_the_config_repr_shows_no_password() -> None:
    config = load_config({"url": "redis://u:in-url@h:1/0", "password": "in-key"})
    assert "in-url" not in repr(config) and "in-key" not in repr(config)

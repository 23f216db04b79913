"""``[capture]`` validation: every error names its key; the shadow DDL rewrite."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from bridge import config
from bridge.apps.capture import CaptureFile
from bridge.apps.capture.shadow import retarget
from bridge.cli.capture import source_origin
from bridge.errors import ConfigError

GOOD = '[capture]\nupstream = "mysql://repl@db:3306/"\ndatabases = ["shop"]\n'


def _load(tmp_path: Path, text: str) -> CaptureFile:
    path = tmp_path / "capture.toml"
    path.write_text(text)
    return config.load(CaptureFile, path)


def test_a_minimal_file_loads_with_defaults(tmp_path: Path) -> None:
    loaded = _load(tmp_path, GOOD)
    assert loaded.capture.snapshot == "initial" and loaded.capture.position == "auto"
    assert loaded.pump_client.strategy == "hash"  # a re-sent Commit reaches the Prewrite's pump
    assert loaded.capture.selects("shop", "orders")
    assert not loaded.capture.selects("shop", "bridge_txn_status")
    assert not loaded.capture.selects("other", "orders")
    assert loaded.capture.meta == "127.0.0.1:8248"  # where `binlog-bridge meta` listens, as for every command


def test_the_log_names_where_the_source_dsn_came_from() -> None:
    flag = argparse.Namespace(upstream="mysql://a@h:1/", config="c.toml")
    plain = argparse.Namespace(upstream=None, config="c.toml")
    assert source_origin(flag, {"BRIDGE_CAPTURE_SOURCE": "mysql://b@h:2/"}) == "--upstream"
    assert source_origin(plain, {"BRIDGE_CAPTURE_SOURCE": "mysql://b@h:2/"}) == "$BRIDGE_CAPTURE_SOURCE"
    assert source_origin(plain, {}) == "capture.upstream of c.toml"


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('snapshot = "sometimes"', "capture.snapshot"),
        ('position = "lsn"', "capture.position"),
        ("server-id = 0", "capture.server-id"),
        ("snapshot-chunk = 0", "capture.snapshot-chunk"),
        ('tables = ["orders"]', "capture.tables"),
        ('tables = ["other.orders"]', "capture.tables"),
        ('status-addr = "nowhere"', "capture.status-addr"),
        ('heartbeat = "soon"', "capture.heartbeat"),
        ("fsync = 1", "capture.fsync"),
        ("databsaes = []", "capture.databsaes"),
    ],
)
def test_bad_values_name_their_key(tmp_path: Path, extra: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        _load(tmp_path, GOOD + extra + "\n")


def test_missing_upstream_and_databases_name_their_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"capture\.upstream"):
        _load(tmp_path, '[capture]\ndatabases = ["shop"]\n')
    with pytest.raises(ConfigError, match=r"capture\.databases"):
        _load(tmp_path, '[capture]\nupstream = "mysql://repl@db/"\n')
    with pytest.raises(ConfigError, match=r"capture\.databases"):
        _load(tmp_path, '[capture]\nupstream = "mysql://repl@db/"\ndatabases = ["mysql"]\n')


def test_the_password_comes_from_the_environment_and_is_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRIDGE_UPSTREAM_PASSWORD", "s3cret")
    dsn = _load(tmp_path, GOOD).capture.dsn()
    assert dsn.password == "s3cret" and "s3cret" not in dsn.redacted()


def test_shadow_ddl_is_retargeted_only_where_the_database_qualifies_a_name() -> None:
    assert retarget("ALTER TABLE shop.t ADD c INT", "shop", "sh") == "ALTER TABLE `sh`.t ADD c INT"
    assert (
        retarget("RENAME TABLE `shop`.`a` TO `shop` . b", "shop", "sh") == "RENAME TABLE `sh`.`a` TO `sh` . b"
    )
    assert retarget("ALTER TABLE t ADD shop INT", "shop", "sh") == "ALTER TABLE t ADD shop INT"
    assert retarget("ALTER TABLE t COMMENT 'myshop.x'", "shop", "sh") == "ALTER TABLE t COMMENT 'myshop.x'"


def test_the_example_loads_and_every_capture_key_is_in_the_guide() -> None:
    """docs/examples/capture.toml is a valid config, and docs/capture.md documents each key."""
    root = Path(__file__).resolve().parents[2]
    loaded = config.load(CaptureFile, root / "docs" / "examples" / "capture.toml")
    assert loaded.capture.databases == ["shop"] and loaded.pump_client.strategy == "hash"
    guide = (root / "docs" / "capture.md").read_text()
    for name in vars(loaded.capture):
        assert f"| `{name.replace('_', '-')}` |" in guide, name


def _capture_args(*flags: str) -> Any:
    from bridge.cli import build_parser

    return build_parser().parse_args(["capture", "--config", "capture.toml", *flags])


def test_the_upstream_comes_from_the_flag_then_bridge_capture_source_then_the_file(tmp_path: Path) -> None:
    from bridge.cli.capture import overrides_of

    path = tmp_path / "capture.toml"
    path.write_text('[capture]\nupstream = "mysql://file@127.0.0.1:3306/"\ndatabases = ["shop"]\n')
    env = {"BRIDGE_CAPTURE_SOURCE": "mysql://root@127.0.0.1:3307/"}

    def upstream(args: Any, environ: dict[str, str]) -> str:
        return config.load(CaptureFile, path, overrides_of(args, environ)).capture.upstream

    assert upstream(_capture_args(), {}) == "mysql://file@127.0.0.1:3306/"
    assert upstream(_capture_args(), env) == "mysql://root@127.0.0.1:3307/"
    assert upstream(_capture_args("--upstream", "mysql://flag@h:1/"), env) == "mysql://flag@h:1/"

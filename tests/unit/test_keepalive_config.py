"""``[keepalive]``: the gRPC keepalive of meta, pumps, drainers and the pump client SDK."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.apps.meta.config import MetaConfig
from bridge.config import build
from bridge.errors import ConfigError
from bridge.grpcutil import KeepaliveConfig, channel_options, process_keepalive, use_keepalive
from bridge.pumpclient.config import PumpClientConfig
from drainer.config import DrainerConfig
from pump.config import PumpConfig


def options(keepalive: KeepaliveConfig | None = None) -> dict[str, Any]:
    return dict(channel_options(keepalive=keepalive))


def test_defaults_are_10s_and_5s() -> None:
    assert (KeepaliveConfig().time, KeepaliveConfig().timeout) == (10.0, 5.0)
    got = options(KeepaliveConfig())
    assert got["grpc.keepalive_time_ms"] == 10_000
    assert got["grpc.keepalive_timeout_ms"] == got["grpc.http2.ping_timeout_ms"] == 5_000
    assert got["grpc.http2.max_ping_strikes"] == 0  # a client pinging faster is never cut off


@pytest.mark.parametrize("cls", [MetaConfig, PumpConfig, DrainerConfig, PumpClientConfig])
def test_every_config_takes_a_keepalive_table(cls: type) -> None:
    base: dict[str, Any] = {"node-id": "n-1"} if cls in (PumpConfig, DrainerConfig) else {}
    config: Any = build(cls, {**base, "keepalive": {"time": "30s", "timeout": "500ms"}})
    assert (config.keepalive.time, config.keepalive.timeout) == (30.0, 0.5)
    assert build(cls, base).keepalive == KeepaliveConfig()
    got = options(config.keepalive)
    assert (got["grpc.keepalive_time_ms"], got["grpc.keepalive_timeout_ms"]) == (30_000, 500)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"time": 0}, "keepalive.time: expected 1s..7200s, got 0ms"),
        ({"time": "100ms"}, "keepalive.time: expected 1s..7200s, got 100ms"),
        ({"time": "3h"}, "keepalive.time: expected 1s..7200s, got 10800s"),
        ({"timeout": "10ms"}, "keepalive.timeout: expected 100ms..600s, got 10ms"),
        ({"timeout": -1}, "keepalive.timeout"),
        ({"timeout": "soon"}, "keepalive.timeout"),
        ({"interval": "1s"}, "keepalive.interval: unknown key"),
    ],
)
def test_nonsense_is_refused_naming_the_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        build(DrainerConfig, {"node-id": "d-1", "keepalive": table})


def test_the_process_default_is_what_a_service_configured() -> None:
    before = process_keepalive()
    try:
        use_keepalive(KeepaliveConfig(time=2.0, timeout=1.0))
        assert options()["grpc.keepalive_time_ms"] == 2_000  # channels that name none
        assert options(KeepaliveConfig())["grpc.keepalive_time_ms"] == 10_000  # one that names its own
        with pytest.raises(ConfigError):
            use_keepalive(KeepaliveConfig(time=0.0))
    finally:
        use_keepalive(before)

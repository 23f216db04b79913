"""PumpClientConfig.chunk-bytes: 0 or at least 1024, loaded from TOML like every key."""

from __future__ import annotations

import pytest

from bridge.config import build
from bridge.errors import ConfigError
from bridge.pumpclient.config import MIN_CHUNK_BYTES, PumpClientConfig


def test_chunk_bytes_default_is_4_mib() -> None:
    config = PumpClientConfig()
    config.validate()
    assert config.chunk_bytes == 4 * 1024 * 1024


@pytest.mark.parametrize("value", [0, MIN_CHUNK_BYTES, 16384, 1 << 30])
def test_chunk_bytes_accepted(value: int) -> None:
    config = build(PumpClientConfig, {"chunk-bytes": value}, prefix="pump-client.")
    config.validate()
    assert config.chunk_bytes == value


@pytest.mark.parametrize("value", [-1, 1, MIN_CHUNK_BYTES - 1])
def test_chunk_bytes_refused_with_the_key_named(value: int) -> None:
    with pytest.raises(
        ConfigError, match=r"chunk-bytes: must be 0 \(never split a transaction\) or at least 1024"
    ):
        PumpClientConfig(chunk_bytes=value).validate()

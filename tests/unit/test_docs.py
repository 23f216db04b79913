"""The configuration reference and the example configs stay true to the code."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bridge.apps.meta.config import MetaConfig
from bridge.config import build, load
from bridge.pumpclient.config import PumpClientConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


def test_configuration_reference_is_fresh() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_config_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", ["meta.toml", "meta-etcd.toml"])
def test_meta_examples_load(name: str) -> None:
    cfg = load(MetaConfig, EXAMPLES / name)
    assert cfg.addr == "127.0.0.1:8248"


def test_pump_client_example_loads() -> None:
    data = tomllib.loads((EXAMPLES / "pump-client.toml").read_text())
    cfg = build(PumpClientConfig, data["pump-client"], prefix="pump-client.")
    assert cfg.strategy == "range"
    assert cfg.batch_max == 512

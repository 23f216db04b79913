"""The file checkpoint: atomic saves, loading, refusing what it cannot trust; the
checkpoint registry; the drainer config's [checkpoint] and [sink] tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.errors import ConfigError
from bridge.sink.registry import FanOutSink, build_sink
from drainer.checkpoint import CheckpointError, CheckpointState, build_checkpoint
from drainer.checkpoint.file import FileCheckpoint
from drainer.config import config_from_dict, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_save_then_load_round_trips(tmp_path: Path) -> None:
    checkpoint = FileCheckpoint(tmp_path / "cp.json", cluster_id=7)
    assert checkpoint.load() is None
    state = CheckpointState(commit_ts=123456789, schema=b"\x00bridge-schema\xff", consistent=False)
    checkpoint.save(state)
    assert checkpoint.load() == state
    checkpoint.save(CheckpointState(123456790, b"", consistent=True))
    assert checkpoint.load() == CheckpointState(123456790, b"", True)
    data = json.loads((tmp_path / "cp.json").read_text())
    assert data["commitTS"] == 123456790 and data["consistent"] is True and data["clusterID"] == 7
    assert not (tmp_path / "cp.json.tmp").exists()
    checkpoint.close()


def test_a_torn_temporary_file_does_not_replace_the_checkpoint(tmp_path: Path) -> None:
    checkpoint = FileCheckpoint(tmp_path / "cp.json")
    checkpoint.save(CheckpointState(10, b"s"))
    (tmp_path / "cp.json.tmp").write_text('{"commitTS": 9')  # a crash while writing the next one
    assert checkpoint.load() == CheckpointState(10, b"s")
    checkpoint.save(CheckpointState(11, b"s"))
    assert checkpoint.load() == CheckpointState(11, b"s")
    checkpoint.close()


@pytest.mark.parametrize(
    "text",
    [
        '{"commitTS": "12"}',
        '{"consistent": true}',
        "not json",
        '{"commitTS": 5, "schema": "!!"}',
        '{"commitTS": -1}',
    ],
)
def test_an_unreadable_checkpoint_stops_the_drainer(tmp_path: Path, text: str) -> None:
    (tmp_path / "cp.json").write_text(text)
    checkpoint = FileCheckpoint(tmp_path / "cp.json")
    with pytest.raises(CheckpointError, match="not a drainer checkpoint"):
        checkpoint.load()
    checkpoint.close()


def test_another_clusters_checkpoint_is_refused(tmp_path: Path) -> None:
    mine = FileCheckpoint(tmp_path / "cp.json", cluster_id=1)
    mine.save(CheckpointState(10))
    mine.close()
    other = FileCheckpoint(tmp_path / "cp.json", cluster_id=2)
    with pytest.raises(CheckpointError, match="belongs to cluster 1, this is cluster 2"):
        other.load()
    other.close()


def test_one_drainer_per_checkpoint(tmp_path: Path) -> None:
    first = FileCheckpoint(tmp_path / "cp.json")
    with pytest.raises(CheckpointError, match="another drainer is using it"):
        FileCheckpoint(tmp_path / "cp.json")
    first.close()
    FileCheckpoint(tmp_path / "cp.json").close()


def test_registry_builds_by_type_with_options(tmp_path: Path) -> None:
    checkpoint = build_checkpoint({"type": "file", "path": "sub/position.json"}, tmp_path, 3)
    assert isinstance(checkpoint, FileCheckpoint)
    assert checkpoint.path == tmp_path / "sub" / "position.json"
    checkpoint.close()
    default = build_checkpoint({}, tmp_path, 3)
    assert isinstance(default, FileCheckpoint) and default.path == tmp_path / "checkpoint.json"
    default.close()
    with pytest.raises(ConfigError, match=r"checkpoint\.type: expected one of file"):
        build_checkpoint({"type": "etcd"}, tmp_path, 3)
    with pytest.raises(ConfigError, match=r"checkpoint\.dsn: unknown key"):
        build_checkpoint({"type": "file", "dsn": "x"}, tmp_path, 3)


def test_config_splits_sink_and_checkpoint_tables() -> None:
    config = config_from_dict(
        {
            "data-dir": "/tmp/d",
            "initial-commit-ts": 5,
            "sink": {"type": ["sqlite", "file"], "sqlite": {"path": "x"}, "file": {"dir": "y"}},
            "checkpoint": {"type": "file", "path": "cp.json"},
            "filter": {"do-db": ["shop"]},
        }
    )
    assert config.sink.types == ["sqlite", "file"]
    assert config.sink.tables == {"sqlite": {"path": "x"}, "file": {"dir": "y"}}
    assert config.checkpoint.table() == {"type": "file", "path": "cp.json"}
    assert config.initial_commit_ts == 5 and config.filter.do_db == ["shop"]
    with pytest.raises(ConfigError, match=r"sink\.kafka: a table for a sink that sink\.type does not name"):
        config_from_dict({"sink": {"type": "sqlite", "kafka": {}}})
    with pytest.raises(ConfigError, match=r"flush-intervall: unknown key \(did you mean 'flush-interval'"):
        config_from_dict({"flush-interval": "1s", "flush-intervall": 2})
    with pytest.raises(ConfigError, match="initial-commit-ts: expected a commit_ts >= 0"):
        config_from_dict({"initial-commit-ts": -1})


def test_the_example_config_loads_and_builds_its_sinks(tmp_path: Path) -> None:
    config = load_config(ROOT / "docs" / "examples" / "drainer.toml", {"data-dir": str(tmp_path)})
    assert config.addr == "127.0.0.1:8249" and config.node_name() == "drainer-1"
    assert config.sink.types == ["sqlite", "file"]
    sink = build_sink(config.sink.types, config.sink.tables, tmp_path)
    assert isinstance(sink, FanOutSink) and sink.name == "sqlite+file"
    build_checkpoint(config.checkpoint.table(), tmp_path, 1).close()

"""A config file that is not UTF-8 or not TOML: every command that reads one says so in one
line naming the file and the fault, exits 2, and prints no traceback (issue 15, item 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bridge.cli import main
from bridge.config import read_toml
from bridge.errors import ConfigError

NOT_UTF8 = b'addr = "127.0.0.1:8250"\nlabel = "caf\xe9"\n'  # Latin-1, as an editor may save it
NOT_TOML = b"this is not = = toml\n"
BINARY = bytes(range(256))  # a file that is no text at all

# Every binlog-bridge command that takes --config (the drainer, pump and meta through their loaders).
COMMANDS = [["meta"], ["pump"], ["drainer"], ["capture"]]


def config_file(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "bad config.toml"
    path.write_bytes(content)
    return path


def test_read_toml_names_the_file_and_the_byte(tmp_path: Path) -> None:
    path = config_file(tmp_path, NOT_UTF8)
    with pytest.raises(ConfigError) as info:
        read_toml(path)
    message = str(info.value)
    assert message == f"{path}: not UTF-8 text: byte 0xe9 on line 2 (offset 36); TOML files are UTF-8"


def test_read_toml_invalid_toml_is_one_line(tmp_path: Path) -> None:
    path = config_file(tmp_path, NOT_TOML)
    with pytest.raises(ConfigError) as info:
        read_toml(path)
    assert str(info.value).startswith(f"{path}: invalid TOML: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(
    ("content", "fault"),
    [(NOT_UTF8, "not UTF-8 text"), (NOT_TOML, "invalid TOML"), (BINARY, "not UTF-8 text")],
    ids=["latin1", "not-toml", "binary"],
)
def test_every_command_prints_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], content: bytes, fault: str
) -> None:
    path = config_file(tmp_path, content)
    assert main([*command, "--config", str(path)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"binlog-bridge {command[0]}: error: {path}: {fault}")
    assert "Traceback" not in err


def test_the_process_exits_2_without_a_traceback(tmp_path: Path) -> None:
    """The whole process, as a user runs it (logging, entry point and all)."""
    path = config_file(tmp_path, NOT_UTF8)
    done = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "pump", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,  # hang guard
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"binlog-bridge pump: error: {path}: not UTF-8 text: byte 0xe9 on line 2 (offset 36); "
        "TOML files are UTF-8"
    )


def test_spark_consumers_config_not_utf8(tmp_path: Path) -> None:
    """``python -m spark_consumers index --config FILE`` reads its TOML with its own loader."""
    from spark_consumers.config import load_toml

    path = config_file(tmp_path, NOT_UTF8)
    with pytest.raises(ConfigError) as info:
        load_toml(path)
    assert str(path) in str(info.value) and "utf-8" in str(info.value)
    assert "\n" not in str(info.value)

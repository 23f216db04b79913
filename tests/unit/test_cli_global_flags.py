"""Global flags of `binlog-bridge` are accepted after the sub-command too (issue 18)."""

from __future__ import annotations

from bridge.cli import build_parser
from tests.support.process import run_cli


def test_log_level_before_or_after_the_sub_command() -> None:
    parser = build_parser()
    assert parser.parse_args(["ctl", "nodes"]).log_level == "info"
    assert parser.parse_args(["--log-level", "warning", "ctl", "nodes"]).log_level == "warning"
    assert parser.parse_args(["ctl", "nodes", "--log-level", "debug"]).log_level == "debug"
    assert parser.parse_args(["ctl", "--log-level", "error", "tso"]).log_level == "error"
    up = ["--upstream", "sqlite:a.db", "--downstream", "sqlite:b.db"]
    after = parser.parse_args(["--log-level", "error", "diff", *up, "--log-level", "debug"])
    assert after.log_level == "debug"


def test_the_level_given_after_the_command_is_the_one_used() -> None:
    result = run_cli(
        "ctl", "--meta", "127.0.0.1:1", "--connect-timeout", "0.3", "tso", "--log-level", "debug"
    )
    assert "unrecognized arguments" not in result.stderr
    assert result.returncode == 3 and " DEBUG " in result.stderr

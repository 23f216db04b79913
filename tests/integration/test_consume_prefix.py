"""`binlog-bridge consume --prefix P` with no topic matching P warns and exits non-zero (issue 18):
a typo must not look like a quiet, successful run."""

from __future__ import annotations

import pytest

from tests.support.process import run_cli

pytestmark = pytest.mark.kafka


def test_a_prefix_matching_no_topic_warns_and_fails(kafka_bootstrap: str, unique_name: str) -> None:
    result = run_cli(
        "consume", "--bootstrap-servers", kafka_bootstrap, "--prefix", f"nosuch{unique_name}",
        "--from-beginning", "--idle-timeout", "2",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"no topic matched --prefix nosuch{unique_name}" in result.stderr
    assert result.stdout == ""

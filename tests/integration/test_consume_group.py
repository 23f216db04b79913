"""``binlog-bridge consume --group NAME`` commits the offsets it printed; a restart resumes there
(issue 18). On the real broker, with topics written by the kafka sink's contract."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.test_consume import ContractWriter, write_history

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

HANG_GUARD = 60
ROWS = 26  # the row messages write_history puts on the table topic (a duplicated transaction too)


def consume(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bridge.cli", "consume", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD, check=False)


def printed(result: subprocess.CompletedProcess[str]) -> list[tuple[int, int]]:
    """(partition, offset) of every row change printed."""
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return [(line["partition"], line["offset"]) for line in lines if "op" in line]


def test_a_restarted_consumer_of_a_group_resumes_after_what_it_printed(
    kafka_bootstrap: str, unique_name: str
) -> None:
    writer = ContractWriter(kafka_bootstrap, unique_name)
    write_history(writer)
    common = ("--bootstrap-servers", kafka_bootstrap, "--topic", writer.topic, "--from-beginning")
    group = ("--group", f"{unique_name}-g")
    first = printed(consume(*common, *group, "--max-messages", "10", "--idle-timeout", "10"))
    assert len(first) == 10
    second = printed(consume(*common, *group, "--idle-timeout", "3"))
    assert len(set(first + second)) == len(first + second) == ROWS  # nothing missed, nothing twice
    assert printed(consume(*common, *group, "--idle-timeout", "2")) == []  # all committed
    refused = consume(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", unique_name, *group, "--apply", "sqlite:x"
    )
    assert refused.returncode == 2 and "--group is for printing" in refused.stderr

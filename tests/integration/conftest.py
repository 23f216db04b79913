"""Fixtures several integration modules share: a meta service and two pumps, each a real child process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.process import ChildProcess
from tests.support.pump_server import PumpProcess, running_pumps, start_meta


@pytest.fixture
def meta_addr(tmp_path: Path, children: list[ChildProcess]) -> str:
    """A meta service (killed with the test's children); its address."""
    child, addr = start_meta(tmp_path)
    children.append(child)
    return addr


@pytest.fixture
def pumps(tmp_path: Path, meta_addr: str) -> Iterator[list[PumpProcess]]:
    """Two pumps, pump-0 and pump-1, registered with ``meta_addr``; SIGKILLed after the test."""
    yield from running_pumps(tmp_path, meta_addr, 2)

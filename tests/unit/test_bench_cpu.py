"""bench/cpu.py: CPU seconds and listening pids read from /proc (Linux)."""

from __future__ import annotations

import os
import socket
import time

import pytest

from bench.cpu import CpuMeter, cpu_seconds, listener_pid


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_seconds_of_this_process_grow_with_work() -> None:
    before = cpu_seconds(os.getpid())
    assert before is not None
    _burn(0.05)
    after = cpu_seconds(os.getpid())
    assert after is not None and after > before


def test_an_unknown_pid_has_no_reading() -> None:
    assert cpu_seconds(2**22 + 12345) is None


def test_listener_pid_finds_this_process_only_while_it_listens() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        assert listener_pid(port) is None  # bound, not listening
        server.listen()
        assert listener_pid(port) == os.getpid()


def test_meter_reports_per_row_microseconds_and_none_for_unknown_parties() -> None:
    meter = CpuMeter({"me": [os.getpid()], "nobody": [None], "gone": [2**22 + 12345]})
    meter.start()
    _burn(0.05)
    spent = meter.stop()
    assert spent["me"] is not None and spent["me"] >= 0.04
    assert spent["nobody"] is None and spent["gone"] is None
    per_row = meter.per_row_us(1000)
    assert per_row["me"] == pytest.approx(spent["me"] * 1000, rel=0.01)
    assert per_row["nobody"] is None

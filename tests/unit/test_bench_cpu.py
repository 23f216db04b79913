"""bench/cpu.py: CPU seconds and listening pids read from /proc (Linux)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cpu import Budget, Counters, CpuMeter, children, cpu_seconds, listener_pid, process_role


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


@contextlib.contextmanager
def waiting_child(*words: str) -> Iterator[subprocess.Popen[bytes]]:
    """A Python child that stays alive until its stdin closes (a child that has exited is a zombie
    with an empty cmdline), yielded once it has exec'd; ``words`` follow its program text."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", *words], stdin=subprocess.PIPE
    )
    try:
        cmdline = Path(f"/proc/{child.pid}/cmdline")
        for _ in range(1000):  # until the fork has exec'd (before, the cmdline is pytest's)
            if b"sys.stdin.read()" in cmdline.read_bytes():
                break
            time.sleep(0.01)
        yield child
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()


def test_budget_names_child_processes_by_role_and_counts_per_row() -> None:
    ticks = iter(range(0, 1000, 10))
    with waiting_child():
        # Earlier tests may have left children of this process running (a session's private
        # MariaDB, say): each is named by its own role beside ours.
        others = [process_role(pid) for pid in children(os.getpid())]
        budget = Budget(servers={"nobody": None}, counters={"calls": lambda: float(next(ticks))})
        budget.start()
        _burn(0.05)
        report = budget.stop(rows=100)
    per_row = report["cpu_us_per_row"]
    assert isinstance(per_row, dict)
    assert per_row["producer"] is not None and per_row["producer"] >= 400  # 0.04 s over 100 rows
    assert per_row["nobody"] is None
    named = [name for name in per_row if name not in ("producer", "measuring", "nobody")]
    python = Path(sys.executable).name
    assert python in others and len(named) == len(others)
    assert {name.rsplit("-", 1)[0] if name.rsplit("-", 1)[-1].isdigit() else name for name in named} == set(
        others
    )
    assert report["per_1000_rows"] == {"calls": 100.0}


def test_counters_report_the_window_per_second_and_per_thousand_rows() -> None:
    totals = iter([10.0, 40.0])
    broken = iter([5.0])  # a counter that cannot be read at the window's end

    def failing() -> float:
        return next(broken)

    counters = Counters({"calls": lambda: next(totals), "gone": failing})
    counters.start()
    report = counters.stop(rows=300, seconds=2.0)
    assert report == {
        "per_second": {"calls": 15.0, "gone": None},
        "per_1000_rows": {"calls": 100.0, "gone": None},
    }


def test_process_role_is_the_binlog_bridge_subcommand() -> None:
    # The child's words are those of `binlog-bridge --log-level warning pump`, behind a program
    # text the role must skip.
    with waiting_child("--log-level", "warning", "pump") as child:
        assert process_role(child.pid) == "pump"
    assert process_role(child.pid) == "gone"

"""Start ``binlog-bridge`` (or any Python module) as a child process, wait for
its ready line, and stop it politely or with SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from bridge.apps.demo.cluster import Cluster
from tests.support.ports import free_port as free_port  # one allocator: never the same port twice


def wait_until(predicate, timeout: float = 30.0, what: str = "condition", interval: float = 0.05):
    """Poll ``predicate`` until it returns a truthy value; fail naming ``what``.

    The timeout is a safety net against hangs, not a performance assertion:
    keep it generous.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:  # the condition may raise until it holds
            last_exc = exc
        else:
            if value:
                return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last error: {last_exc!r}")


class ChildProcess:
    """A child process whose combined output is collected in memory and a log file."""

    def __init__(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self._lines: list[str] = []
        self._cond = threading.Condition()
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self._log = log_path.open("a", encoding="utf-8")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full_env,
        )
        self._reader = threading.Thread(target=self._pump_output, daemon=True)
        self._reader.start()

    def _pump_output(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            with self._cond:
                self._lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def output(self) -> str:
        with self._cond:
            return "\n".join(self._lines)

    def wait_for_line(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Wait until a line of output matches ``pattern``; fail with the output so far."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    if m := regex.search(line):
                        return m
                seen = len(self._lines)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    break
                self._cond.wait(min(remaining, 0.2))
        raise AssertionError(
            f"{self.argv!r} printed no line matching {pattern!r} "
            f"(exit status {self.proc.poll()}); output:\n{self.output}"
        )

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it does not exit within ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(timeout=5)
        self._log.close()
        return self.proc.returncode

    def wait(self, timeout: float = 60.0) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return rc


def bridge_cli(*args: str) -> list[str]:
    """argv that runs the ``binlog-bridge`` CLI of this checkout."""
    return [sys.executable, "-m", "bridge.cli", *args]


def run_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run one ``binlog-bridge`` command to completion and capture its output."""
    return subprocess.run(bridge_cli(*args), capture_output=True, text=True, timeout=timeout)


def discard(cluster: Cluster) -> None:
    """Tear a test's cluster down: SIGKILL every member's process group (a drainer's worker
    processes too) and reap it. For teardown only, where nothing is asserted about the stop: the
    clean stop :meth:`Cluster.stop` makes (SIGTERM, then each process's own shutdown, about a
    second per group of members here) costs 3-4 s per test and tells a test nothing it checks;
    tests of the clean stop itself call ``stop``. Never raises."""
    for member in cluster.members.values():
        member.expected_up = False
        try:
            member.process.kill()
        except Exception as exc:  # a teardown must not hide the test's own failure
            print(f"discard: killing {member.name} failed: {exc!r}", file=sys.stderr)

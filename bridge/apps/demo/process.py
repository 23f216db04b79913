"""One child process of the demo: its argv, its log file, its ready line, a clean or hard stop.

Each child runs in a process group of its own, so a Ctrl-C at the terminal
reaches only the demo, which then stops the children in order; signals to a
child go to its whole group. Output goes straight to a log file (stderr, and
stdout unless a separate file is given), never through a pipe the demo would
have to drain: a child never blocks on the demo, and the log survives it.
A restarted child appends to the same log after a ``--- start`` line.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from bridge.apps.demo.errors import ServiceFailed

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.05
TAIL_LINES = 25


class ServiceProcess:
    """A child process with its output in ``log_path``; started by :meth:`start`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        stdout_path: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.stdout_path = stdout_path
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._offset = 0  # where this start's output begins in the log

    def start(self) -> None:
        """Start the child (again, after it exited); its output is appended to the log."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log_file:
            stamp = datetime.now().isoformat(timespec="seconds")
            log_file.write(f"--- {stamp} start: {shlex.join(self.argv)}\n".encode())
            log_file.flush()
            self._offset = log_file.tell()
            stdout = self.stdout_path.open("ab") if self.stdout_path else log_file
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=log_file,
                    env=self.env,
                    process_group=0,
                )
            finally:
                if stdout is not log_file:
                    stdout.close()
        self.starts += 1
        log.debug("%s started, pid %d: %s", self.name, self.proc.pid, shlex.join(self.argv))

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def output(self) -> str:
        """What the child wrote to the log since its last start."""
        try:
            with self.log_path.open("rb") as log_file:
                log_file.seek(self._offset)
                return log_file.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = TAIL_LINES) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def failure(self, what: str) -> ServiceFailed:
        """An error naming this child, ``what`` happened, and the tail of its log."""
        tail = self.tail()
        body = "\n".join(f"    {line}" for line in tail.splitlines()) or "    (its log is empty)"
        return ServiceFailed(f"{self.name} {what}; the end of {self.log_path}:\n{body}")

    def wait_ready(self, pattern: str, timeout: float) -> str:
        """Wait for a complete line of output matching ``pattern``; return it.

        Raises :class:`ServiceFailed` when the child exits first or ``timeout``
        (a guard against hangs) passes.
        """
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            exited = not self.running  # read before the log: output written before exit is seen
            for line in self.output().splitlines(keepends=True):
                if line.endswith("\n") and regex.search(line):
                    return line.rstrip("\n")
            if exited:
                raise self.failure(f"exited with status {self.returncode} before it was ready")
            if time.monotonic() >= deadline:
                raise self.failure(f"printed no line matching {pattern!r} within {timeout:g}s")
            time.sleep(POLL_INTERVAL)

    def check(self) -> None:
        """Raise :class:`ServiceFailed` if the child has exited."""
        if self.proc is not None and not self.running:
            raise self.failure(f"exited unexpectedly with status {self.returncode}")

    def send(self, signum: int) -> None:
        """Send ``signum`` to the child's process group, if it still runs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            log.debug("%s: process group %d is gone already", self.name, self.proc.pid)

    def wait(self, timeout: float) -> int:
        """The exit status; ``subprocess.TimeoutExpired`` if it still runs after ``timeout``."""
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: the child gets no chance to clean up."""
        self.send(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout: float = 30.0, signum: int = signal.SIGTERM, send: bool = True) -> int | None:
        """``signum`` (SIGTERM), then SIGKILL if the child still runs after ``timeout``.

        ``send=False``: the signal was sent already (a second one could cut a
        clean shutdown short). Returns the exit status (negative: the signal
        that ended it), None if never started.
        """
        if self.proc is None:
            return None
        if send:
            self.send(signum)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            name = signal.Signals(signum).name
            log.warning("%s did not stop within %gs of %s; killing it", self.name, timeout, name)
            self.kill()
            return self.proc.returncode

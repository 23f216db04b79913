"""A private MariaDB server for tests: its own datadir, port, socket and pid file.

The shared server on 3306 (``scripts/services``) is the *upstream* of the end-to-end
tests; a sink under test needs a *downstream* it can also stop, kill and restart
without disturbing anyone else. :class:`MariaDBInstance` initializes a datadir with
``mariadb-install-db`` (root without a password, reachable over TCP) and runs
``mariadbd`` on ``127.0.0.1:port`` as a child process.

The server is tuned to be small and fast, not durable:

* ``innodb_buffer_pool_size=64M``, a small log buffer, no performance schema, small
  Aria/MyISAM caches: a few hundred MB of RSS at most on a shared 2-core machine;
* ``innodb_flush_log_at_trx_commit=2``, no doublewrite buffer and no binlog (unless ``binlog=True``): a
  commit is written to the OS but not fsynced, so a *machine* crash may lose the
  last second (or tear a page) — irrelevant for tests; a SIGKILL of ``mariadbd``
  loses nothing, InnoDB recovers from its redo log on the next start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import pymysql

MAX_SOCKET_PATH = 100  # a unix socket's path has at most 107 bytes

SERVER_BINARIES = ("mariadbd", "mysqld")
INSTALL_BINARIES = ("mariadb-install-db", "mysql_install_db")
SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/libexec")

# Small and fast: see the module docstring.
TUNING = (
    "--innodb-buffer-pool-size=64M",
    "--innodb-log-file-size=64M",
    "--innodb-log-buffer-size=8M",
    "--innodb-flush-log-at-trx-commit=2",
    "--innodb-doublewrite=0",
    "--performance-schema=OFF",
    "--key-buffer-size=8M",
    "--aria-pagecache-buffer-size=8M",
    "--max-connections=300",
    "--max-allowed-packet=64M",
    "--skip-name-resolve",
)
# No binlog unless asked for; with ``binlog=True`` the server is a source that
# ``binlog-bridge capture`` can read (docs/capture.md).
NO_BINLOG = ("--skip-log-bin",)
BINLOG = (
    "--log-bin=mariadb-bin",
    "--server-id=1",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
)


def _find_binary(names: tuple[str, ...]) -> str:
    """The first of ``names`` on PATH or in the usual sbin directories."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
        for directory in SBIN_DIRS:
            candidate = Path(directory) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise FileNotFoundError(
        f"none of {', '.join(names)} is installed (scripts/services up mariadb installs mariadb-server)"
    )


class MariaDBInstance:
    """One ``mariadbd`` under ``workdir`` listening on ``127.0.0.1:port``.

    ``workdir`` holds ``data/`` (initialized on the first :meth:`start`, reused by
    later ones), ``mariadbd.sock``, ``mariadbd.pid`` and ``mariadbd.log``.
    ``server_args`` are added to the ``mariadbd`` command line (``--ssl-cert=...``);
    ``binlog=True`` writes a row binlog with full metadata (a capture source).
    """

    host = "127.0.0.1"
    user = "root"

    def __init__(
        self,
        workdir: Path,
        port: int,
        *,
        start_timeout: float = 60.0,
        server_args: Sequence[str] = (),
        binlog: bool = False,
    ) -> None:
        self.workdir = Path(workdir)
        self.port = port
        self.start_timeout = start_timeout
        self.server_args = (*(BINLOG if binlog else NO_BINLOG), *server_args)
        self.datadir = self.workdir / "data"
        self.socket = self.workdir / "mariadbd.sock"
        if len(str(self.socket)) > MAX_SOCKET_PATH:  # a deep tmp_path (a pytest-xdist worker's)
            self.socket = Path(tempfile.gettempdir()) / f"bridge-mariadb-{os.getuid()}-{port}.sock"
        self.pid_file = self.workdir / "mariadbd.pid"
        self.log_path = self.workdir / "mariadbd.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # ------------------------------------------------------------ properties

    @property
    def dsn(self) -> str:
        """``mysql://root@127.0.0.1:PORT/`` — the server, no database."""
        return f"mysql://{self.user}@{self.host}:{self.port}/"

    @property
    def running(self) -> bool:
        """Whether the ``mariadbd`` child is alive (it may still be starting)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    def connect(
        self, database: str | None = None, *, autocommit: bool = True, connect_timeout: float = 5.0
    ) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
        """A new pymysql connection as root over TCP (autocommit unless told otherwise)."""
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password="",
            database=database,
            autocommit=autocommit,
            connect_timeout=connect_timeout,
        )

    def answers(self) -> bool:
        """Whether a ``SELECT 1`` over TCP succeeds right now."""
        try:
            conn = self.connect(connect_timeout=2)
        except pymysql.err.MySQLError:
            return False
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT 1")
                return cursor.fetchone() == (1,)
        except pymysql.err.MySQLError:
            return False
        finally:
            conn.close()

    # ------------------------------------------------------------ lifecycle

    def initialize(self) -> None:
        """Create the datadir with ``mariadb-install-db`` unless it exists already."""
        if (self.datadir / "mysql").is_dir():
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.datadir.exists():  # a half-initialized datadir from an interrupted run
            shutil.rmtree(self.datadir)
        command = [
            _find_binary(INSTALL_BINARIES),
            "--no-defaults",
            f"--user={_user_name()}",
            f"--datadir={self.datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
        with self.log_path.open("ab") as log:
            log.write(f"\n=== {time.strftime('%FT%T')} {' '.join(command)}\n".encode())
            log.flush()
            result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=120, check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"mariadb-install-db for {self.datadir} exited with {result.returncode}:\n{self.log_tail()}"
            )

    def start(self) -> None:
        """Start ``mariadbd`` (initializing the datadir first) and wait until it answers."""
        if self.running:
            if not self.answers():
                self._wait_ready()
            return
        self.initialize()
        self._close_log()
        self._log = self.log_path.open("ab")
        command = [
            _find_binary(SERVER_BINARIES),
            "--no-defaults",
            f"--user={_user_name()}",
            f"--datadir={self.datadir}",
            f"--socket={self.socket}",
            f"--pid-file={self.pid_file}",
            f"--port={self.port}",
            f"--bind-address={self.host}",
            *TUNING,
            *self.server_args,
        ]
        self._log.write(f"\n=== {time.strftime('%FT%T')} {' '.join(command)}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the test terminal does not reach it
        )
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not self.answers():
            if self._proc is None or self._proc.poll() is not None:
                status = None if self._proc is None else self._proc.returncode
                raise RuntimeError(
                    f"mariadbd on {self.host}:{self.port} exited with {status} while starting:\n"
                    f"{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"mariadbd on {self.host}:{self.port} did not answer within {self.start_timeout:g}s:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM and wait for a clean shutdown (SIGKILL after ``timeout``)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()

    def kill(self) -> None:
        """SIGKILL: no shutdown; InnoDB recovers on the next :meth:`start`."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(timeout=30)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def drop_database(self, name: str) -> None:
        """``DROP DATABASE IF EXISTS`` (the server must be running)."""
        conn = self.connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{name.replace('`', '``')}`")
        finally:
            conn.close()

    def __enter__(self) -> MariaDBInstance:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"MariaDBInstance({self.host}:{self.port}, {self.workdir}, {state})"


def _user_name() -> str:
    """The OS user ``mariadbd`` runs as: whoever runs the tests (root in CI containers)."""
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name

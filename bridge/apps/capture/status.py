"""The capture's HTTP endpoint: ``GET /status`` (JSON) and ``GET /metrics`` (Prometheus text).

``/status`` answers::

    {"state": "streaming", "position": {"flavor": "mariadb", "mode": "gtid", "file": "...",
     "offset": 1234, "gtid": "0-1-42"}, "lag_seconds": 0.4, "last_commit_ts": 4438...,
     "transactions": 120, "row_changes": 5120, "snapshot": "done", "error": null}

``state`` is one of starting, snapshot, streaming, stopping, failed. The
server is the one pumps and drainers serve (:class:`bridge.status_http.StatusServer`:
its limits, error answers, 404 naming the endpoints); the capture is
synchronous, so it runs on an event loop of its own thread and answers while
the capture waits on the upstream or the pumps.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from bridge import status_http
from bridge.config import check_addr
from bridge.errors import ConfigError

T = TypeVar("T")


class StatusServer:
    """Serves ``status()`` and the metrics on ``addr`` (host:port; port 0 picks one)."""

    def __init__(self, addr: str, status: Callable[[], Mapping[str, object]]) -> None:
        host, port = check_addr(addr, "capture.status-addr")
        self._server = status_http.StatusServer("capture", status, host, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="capture-status", daemon=True)
        self.port = port

    def start(self) -> None:
        """Listen and answer from the thread; a port not free is a ConfigError naming the key."""
        self._thread.start()
        try:
            self.port = self._call(self._server.start())
        except ConfigError as exc:  # "status-addr: cannot listen on ..."
            self._close_loop()
            raise ConfigError(f"capture.{exc}") from exc

    def stop(self) -> None:
        self._call(self._server.stop())
        self._close_loop()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

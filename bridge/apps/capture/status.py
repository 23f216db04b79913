"""The capture's HTTP endpoint: ``GET /status`` (JSON) and ``GET /metrics`` (Prometheus text).

``/status`` answers::

    {"state": "streaming", "position": {"flavor": "mariadb", "mode": "gtid", "file": "...",
     "offset": 1234, "gtid": "0-1-42"}, "lag_seconds": 0.4, "last_commit_ts": 4438...,
     "transactions": 120, "row_changes": 5120, "snapshot": "done", "error": null}

``state`` is one of starting, snapshot, streaming, stopping, failed. Served
by a thread of its own, so it answers while the capture waits on the
upstream or the pumps.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bridge.config import check_addr
from bridge.errors import ConfigError

log = logging.getLogger(__name__)


class StatusServer:
    """Serves ``status()`` and the metrics on ``addr`` (host:port; port 0 picks one)."""

    def __init__(self, addr: str, status: Callable[[], Mapping[str, object]]) -> None:
        host, port = check_addr(addr, "capture.status-addr")
        handler = _handler(status)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise ConfigError(f"capture.status-addr: cannot listen on {addr}: {exc.strerror}") from exc
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="capture-status", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("status endpoint on http://%s:%d", self._server.server_address[0], self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(status: Callable[[], Mapping[str, object]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/status":
                body = json.dumps(status(), default=str).encode()
                self._reply(HTTPStatus.OK, "application/json", body)
            elif self.path == "/metrics":
                self._reply(HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest())
            else:
                message = {"error": f"no endpoint {self.path}; endpoints: GET /status, GET /metrics"}
                self._reply(HTTPStatus.NOT_FOUND, "application/json", json.dumps(message).encode())

        def _reply(self, code: HTTPStatus, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("status endpoint: %s", format % args)

    return Handler

"""The pump's HTTP endpoint: status, Prometheus metrics and state control.

=====================  =====================================================
``GET /status``        JSON: node id, state, watermark, max commit ts,
                       unpaired Prewrites, disk, score, storage figures
``GET /metrics``       Prometheus text format (every ``bridge_*`` metric)
``POST /state/pause``  online -> paused; answers once paused
``POST /state/resume`` paused -> online
``POST /state/close``  begins closing; answers once closing is registered
=====================  =====================================================

State changes answer 200 with the status JSON, 409 with ``{"error": ...}``
when the current state does not allow the change. The server, its limits,
error answers and TLS are the shared :mod:`bridge.status_http`.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from bridge import status_http
from bridge.status_http import Response, server_ssl_context
from pump import metrics

__all__ = ["NodeControl", "StatusServer", "server_ssl_context"]


class NodeControl(Protocol):
    """What the endpoint drives; :class:`pump.node.PumpNode` is one."""

    def status(self) -> Mapping[str, object]: ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    async def close(self) -> None: ...


class StatusServer(status_http.StatusServer):
    """The pump's endpoint for ``control`` on ``host:port`` (port 0 = any free port)."""

    def __init__(
        self, control: NodeControl, host: str, port: int, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(
            "pump",
            control.status,
            host,
            port,
            routes={
                "/state/pause": {"POST": self._state_change(control.pause)},
                "/state/resume": {"POST": self._state_change(control.resume)},
                "/state/close": {"POST": self._state_change(control.close)},
            },
            on_error=metrics.ERRORS.labels("http").inc,
            ssl_context=ssl_context,
        )

    def _state_change(self, change: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[Response]]:
        async def handler() -> Response:
            await change()
            return self.status_response()

        return handler

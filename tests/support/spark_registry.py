"""The in-process ``mock://`` schema registry served over HTTP, read-only, for Spark's Python workers.

confluent-kafka's ``mock://`` registry exists only in the process that made it; the drainer of
tests/e2e/test_kafka_registry_e2e.py registers its schemas there. Spark decodes in worker
processes, which reach a registry only over HTTP: this serves the one endpoint a Confluent
deserializer needs, ``GET /schemas/ids/{id}`` (the Schema Registry REST API's answer shape), from
that mock, so the workers' real ``SchemaRegistryClient`` fetches the drainer's real schema ids.
Nothing else of the registry is imitated; there is no Schema Registry server on this machine.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_SCHEMA_BY_ID = re.compile(r"^/schemas/ids/(\d+)(?:\?.*)?$")


@contextmanager
def http_registry(mock: Any) -> Iterator[str]:
    """Serve ``mock``'s schemas by id on a free loopback port; yields the registry URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = _SCHEMA_BY_ID.match(self.path)
            schema = None
            if found is not None:
                try:
                    schema = mock.get_schema(int(found.group(1)))
                except Exception:  # the mock raises SchemaRegistryError 404 for unknown ids
                    schema = None
            if schema is None:
                self._reply(404, {"error_code": 40403, "message": "Schema not found"})
                return
            self._reply(200, {"schema": schema.schema_str, "schemaType": schema.schema_type or "AVRO"})

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="http-registry", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

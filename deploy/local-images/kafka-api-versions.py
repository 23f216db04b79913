#!/usr/bin/env python3
"""The Kafka stand-in's kafka-broker-api-versions.sh: exit 0 when the broker at
--bootstrap-server answers an ApiVersions request (what the official script's check amounts to
for a healthcheck), print the API keys it supports."""

import argparse
import socket
import struct
import sys

API_VERSIONS = 18


def api_versions(host: str, port: int) -> list[int]:
    client = b"healthcheck"
    body = struct.pack(">hhih", API_VERSIONS, 0, 1, len(client)) + client
    with socket.create_connection((host, port), timeout=5) as conn:
        conn.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
        reply = conn.recv(size, socket.MSG_WAITALL)
    _correlation, error, count = struct.unpack(">ihi", reply[:10])
    if error:
        raise OSError(f"ApiVersions error code {error}")
    return [struct.unpack(">h", reply[10 + 6 * i : 12 + 6 * i])[0] for i in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-server", required=True)
    host, _, port = parser.parse_args().bootstrap_server.rpartition(":")
    try:
        keys = api_versions(host, int(port))
    except (OSError, struct.error) as exc:
        print(f"{host}:{port}: {exc}", file=sys.stderr)
        return 1
    print(f"{host}:{port} supports API keys {keys}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

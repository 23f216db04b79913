#!/bin/sh
# The Kafka stand-in: one Tansu broker, in memory, on the PLAINTEXT listener of the official
# image's KAFKA_LISTENERS / KAFKA_ADVERTISED_LISTENERS. Tansu serves one listener: the others
# (CONTROLLER, and a second one for the host such as HOST://...:29092) are not served, and
# KAFKA_LOG_DIRS is not honoured (a restart loses every topic). docs/docker.md says so.
set -eu
# listener NAME LIST: the host:port of NAME://host:port in a comma-separated LIST.
listener() { printf '%s\n' "$2" | tr ',' '\n' | sed -n "s|^$1://||p" | head -n 1; }
listen=$(listener PLAINTEXT "${KAFKA_LISTENERS:-PLAINTEXT://0.0.0.0:9092}")
advertised=$(listener PLAINTEXT "${KAFKA_ADVERTISED_LISTENERS:-PLAINTEXT://$(hostname):9092}")
for name in $(printf '%s\n' "${KAFKA_LISTENERS:-}" | tr ',' '\n' | sed -n 's|://.*||p'); do
    [ "$name" = PLAINTEXT ] || echo "kafka stand-in: listener $name is not served (Tansu has one listener)" >&2
done
echo "kafka stand-in: Tansu on $listen, advertised as $advertised, in memory" >&2
exec tansu broker --storage-engine=memory://tansu/ --listener-url="tcp://$listen" \
    --advertised-listener-url="tcp://$advertised" "$@"

"""Prometheus metrics of the Avro codecs (``bridge_avro_*``), in the process-wide default registry.

Exported wherever the codecs run (the drainer's ``GET /metrics`` with the
Kafka sink). Label values are small fixed sets, never a subject or schema.
"""

from __future__ import annotations

from prometheus_client import Counter

SCHEMAS = Counter(
    "bridge_avro_schemas_total",
    "Writer schemas a codec registered (encoding=registry) or published (encoding=single-object); "
    "once per schema and process",
    ["encoding"],
)
REGISTRY_ERRORS = Counter(
    "bridge_avro_registry_errors_total",
    "Schema registry calls that failed: refused (e.g. an incompatible schema) or unavailable "
    "(unreachable, HTTP 5xx)",
    ["kind"],
)
FASTAVRO_FALLBACKS = Counter(
    "bridge_avro_fastavro_fallbacks_total",
    "Records the compiled writer left to fastavro (a datum outside its rules); row records never "
    "need it, so a rising count means an unexpected datum type somewhere",
)

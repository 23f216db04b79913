# syntax=docker/dockerfile:1
# The binlog bridge image: one multi-stage file, three stages.
#
#   wheel   builds the project's wheel from the source tree and installs it with its
#           dependencies into the venv /opt/bridge (nothing else of this stage reaches the images)
#   bridge  Python 3.11 slim + that venv: meta, pump, drainer, load, diff, ctl, consume and
#           `python -m spark_consumers search` (the default target)
#   spark   bridge + a JRE (and, unless SPARK_KAFKA_PACKAGE is empty, Spark's Kafka connector):
#           the Spark master, worker and index job
#
#   docker build -t binlog-bridge .                      # the bridge target
#   docker build --target spark -t binlog-bridge-spark .
#
# Without registry or index access (docs/docker.md): scripts/offline-images makes a local base
# image and, on it, an image holding every dependency's wheel in /wheelhouse; then
#   docker build --network host --build-arg PYTHON_IMAGE=binlog-bridge-local/python:3.11-bookworm \
#       --build-arg BUILD_IMAGE=binlog-bridge-local/python-wheels:3.11-bookworm --build-arg OFFLINE=1 \
#       --build-arg SPARK_KAFKA_PACKAGE= ...
# (deploy/compose/local-images.yml passes the same to `docker compose build`). The file works
# with the classic builder (DOCKER_BUILDKIT=0) as with BuildKit.
#
# docker-compose.yml builds both. tests/e2e/test_compose_docker.py builds them offline and runs
# the compose file; tests/integration/test_compose_build.py replays the wheel stage on the host.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
# The wheel stage's base: the same Python image, or (offline) one that also holds the wheels.
ARG BUILD_IMAGE=python:3.11.11-slim-bookworm

FROM ${BUILD_IMAGE} AS wheel
# OFFLINE=1: pip takes every wheel (the build backend's too) from /wheelhouse, never the index.
ARG OFFLINE=
WORKDIR /src
# Offline, the dependencies come first, in a layer of their own that only another BUILD_IMAGE
# rebuilds (/wheelhouse/requirements.txt: pyproject's list); online, pip installs them with the
# project's wheel below.
RUN python -m venv /opt/bridge \
    && if [ -n "$OFFLINE" ]; then \
        /opt/bridge/bin/pip install --no-cache-dir --no-index --find-links /wheelhouse -r /wheelhouse/requirements.txt; \
    fi
COPY pyproject.toml README.md ./
COPY bridge ./bridge
COPY pump ./pump
COPY drainer ./drainer
COPY bench ./bench
COPY schemas/avro ./schemas/avro
COPY spark_consumers ./spark_consumers
RUN set -- ${OFFLINE:+--no-index --find-links /wheelhouse} \
    && pip wheel --no-deps "$@" --wheel-dir /dist . \
    && /opt/bridge/bin/pip install --no-cache-dir "$@" /dist/*.whl

FROM ${PYTHON_IMAGE} AS bridge
# PATH first: the venv's binlog-bridge, python and spark-class are what the compose commands name.
ENV PATH=/opt/bridge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=wheel /opt/bridge /opt/bridge
# Data lives under /var/lib/bridge (the compose file mounts a named volume there per service;
# verify mounts the index job's volume at /var/lib/bridge/index). Both exist in the image, owned
# by the user, so a new volume mounted on either takes that owner.
RUN useradd --system --uid 10001 --home-dir /var/lib/bridge --create-home bridge \
    && install -d -o bridge -g bridge /var/lib/bridge/index
USER bridge
WORKDIR /var/lib/bridge
CMD ["binlog-bridge", "--help"]

FROM bridge AS spark
USER root
# Spark needs a JVM; only this target carries one.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
# java is on PATH through Debian's alternatives (any architecture); SPARK_HOME is pip's pyspark.
ENV SPARK_HOME=/opt/bridge/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/bridge/bin/python
# Spark's own Kafka source (`spark_consumers index --source kafka`): Ivy resolves the connector
# with its dependencies (kafka-clients, commons-pool2, the token provider) once, at build time,
# into Spark's jars folder, so the jobs never download anything at run time. Empty (an offline
# build: Maven Central unreachable) leaves it out; the default source (python) needs no jar.
ARG SPARK_KAFKA_PACKAGE=org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0
RUN if [ -n "$SPARK_KAFKA_PACKAGE" ]; then \
        python -c "import sys; from pyspark.sql import SparkSession; SparkSession.builder.master('local[1]').config('spark.jars.packages', sys.argv[1]).config('spark.jars.ivy', '/tmp/ivy').getOrCreate().stop()" "$SPARK_KAFKA_PACKAGE" \
        && cp -n /tmp/ivy/jars/*.jar "$SPARK_HOME/jars/" \
        && rm -rf /tmp/ivy; \
    fi
USER bridge

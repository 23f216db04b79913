# syntax=docker/dockerfile:1
# The binlog bridge image: one multi-stage file, three stages.
#
#   wheel   builds the project's wheel from the source tree (nothing of it reaches the images)
#   bridge  Python 3.11 slim + the wheel in /opt/bridge: meta, pump, drainer, load, diff, ctl,
#           consume and `python -m spark_consumers search` (the default target)
#   spark   bridge + a JRE and Spark's Kafka connector: the Spark master, worker and index job
#
#   docker build -t binlog-bridge .                      # the bridge target
#   docker build --target spark -t binlog-bridge-spark .
#
# docker-compose.yml builds both. tests/integration/test_compose_build.py runs the wheel and
# install steps below on the host (the same commands, with /src, /dist and /opt/bridge moved to
# a temporary folder); docs/docker.md says what cannot run without a Docker engine.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bridge ./bridge
COPY pump ./pump
COPY drainer ./drainer
COPY bench ./bench
COPY spark_consumers ./spark_consumers
RUN pip wheel --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE} AS bridge
# PATH first: the venv's binlog-bridge, python and spark-class are what the compose commands name.
ENV PATH=/opt/bridge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=wheel /dist /dist
RUN python -m venv /opt/bridge && /opt/bridge/bin/pip install --no-cache-dir /dist/*.whl && rm -rf /dist
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
# into Spark's jars folder, so the jobs never download anything at run time.
ARG SPARK_KAFKA_PACKAGE=org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0
RUN python -c "import sys; from pyspark.sql import SparkSession; SparkSession.builder.master('local[1]').config('spark.jars.packages', sys.argv[1]).config('spark.jars.ivy', '/tmp/ivy').getOrCreate().stop()" "$SPARK_KAFKA_PACKAGE" \
    && cp -n /tmp/ivy/jars/*.jar "$SPARK_HOME/jars/" \
    && rm -rf /tmp/ivy
USER bridge

"""The one SparkSession of a test run (``spark``, session-scoped, registered in tests/conftest.py):
starting Spark takes 7-15 s and half a GB, and a second session in one process does not work.
Light to import: Spark starts only when a test asks for the fixture."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The test run's only SparkSession (local[2]), with the bridge_changes data source registered."""
    from spark_consumers.session import spark_session

    session = spark_session("local[2]", "bridge-tests", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
